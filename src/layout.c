#include "layout.h"

int cfs_layout_apply(cfs_dataset *ds, const cfs_layout_opts *opts, cfs_err *err)
{
    switch (opts->order) {
    case CFS_ORDER_ORIGINAL:
        /* Source order and source encodings are served as they are. */
        (void)ds;
        return 0;
    }
    return cfs_err_set(err, "unknown cell order");
}
