/* The published views beside the stores (docs/design.md §5, §9): each live dataset's view
 * (session.h) is looked at on every refresh, a stat, and read once when it is new or changed.
 * It is served as <id>.cellucid-session from the bytes read, the very bytes whose length and
 * digest datasets.json lists: never the file read again. A new version is a new node, as each
 * version of datasets.json is (volume.c), and the kernel looks both names up at every open. */
#include "volume_impl.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "remote.h"
#include "utf8.h"

/* The source folder the mount was given, where a NAME.url source's view lies; NULL for a
 * single input. */
static const char *view_folder(const cfs_volume *v)
{
    struct stat st;
    return !cfs_is_url(v->src) && stat(v->src, &st) == 0 && S_ISDIR(st.st_mode) ? v->src : NULL;
}

/* What there is of (source, part)'s view now, taken in when it moved from held; *moved false
 * (and *now empty) when it did not, or when it is being written (the next pass looks again). */
static int look_again(const char *folder, const cfs_prepared *p, const cfs_session *held,
                      cfs_session *now, bool *moved, cfs_err *err)
{
    *moved = false;
    if (cfs_session_look(folder, p->source, p->part, now, err) < 0)
        return -1;
    if (!cfs_session_moved(held, now)) {
        cfs_session_clear(now);
        return 0;
    }
    if (cfs_session_take(now, folder, cfs_session_unlisted(p), err) < 0) {
        cfs_session_clear(now);
        return err->status == CFS_ERETRY ? 0 : -1;
    }
    *moved = true;
    return 0;
}

int cfs_vol_sessions_of_new(cfs_volume *v, const cfs_prepared_set *set, cfs_session *views,
                            cfs_err *err)
{
    static const cfs_session none = {0};
    const char *folder = view_folder(v);
    bool moved;
    for (size_t i = 0; i < set->n; i++) {
        const cfs_prepared *p = &set->items[i];
        if (!p->reused && !p->pending &&
            look_again(folder, p, &none, &views[i], &moved, err) < 0)
            return -1;
    }
    return 0;
}

/* Under the lock: e's view leaves the root (a reader that looked it up just before still
 * reads it: never more than two versions of a view are held). */
static void unserve(cfs_volume *v, ds_entry *e, stale_names *stale)
{
    if (!e->session_ino)
        return;
    cfs_vol_note_stale(stale, v->v[e->session_ino - 1].name);
    cfs_vol_replace_version(v, &e->session_ino, &e->session_prev_ino, 0);
}

/* Under the lock: e's view read and listed is served beside its store, as a node of its own
 * holding the bytes read, in place of the version before. */
static void serve(cfs_volume *v, ds_entry *e, stale_names *stale)
{
    if (!e->session.bytes || !e->live || !e->served || !e->p.embedding) {
        unserve(v, e, stale);
        return;
    }
    vnode n = {.kind = VN_SESSION, .name = cfs_session_served_name(e->p.id),
               .text = (char *)e->session.bytes, .size = e->session.len,
               .parent = CFS_VOLUME_ROOT};
    e->session.bytes = NULL;    /* the node's now */
    /* Its ETag (mtime + size) changes with its bytes: a view rewritten with its old mtime and
     * length is still a new version. */
    clock_gettime(CLOCK_REALTIME, &n.mtime);
    uint64_t ino = n.name ? cfs_vol_add_vnode(v, n) : 0;
    if (!ino) {
        free(n.name);
        free(n.text);
        unserve(v, e, stale);
        return;
    }
    cfs_vol_note_stale(stale, n.name);
    if (cfs_vol_replace_version(v, &e->session_ino, &e->session_prev_ino, ino) < 0)
        unserve(v, e, stale);   /* listed with the bytes served, or not at all */
}

void cfs_vol_session_adopt(cfs_volume *v, ds_entry *e, cfs_session *s, stale_names *stale)
{
    cfs_session_clear(&e->session);
    e->session = *s;
    memset(s, 0, sizeof *s);
    cfs_session_report(&e->session, e->session.file ? cfs_vol_shown_source(v, e->session.file)
                                                    : NULL, v->log);
    serve(v, e, stale);
}

void cfs_vol_session_retire(cfs_volume *v, ds_entry *e, stale_names *stale)
{
    unserve(v, e, stale);
}

/* A live entry whose view is looked at again, and what was found. */
typedef struct view_check {
    ds_entry *e;
    cfs_session now;
    bool moved;
} view_check;

int cfs_vol_sessions_refresh(cfs_volume *v, stale_names *stale, cfs_err *err)
{
    pthread_mutex_lock(&v->lock);
    view_check *checks = calloc(v->nds + 1, sizeof *checks);
    size_t n = 0;
    for (size_t i = 0; checks && i < v->nds; i++)
        if (v->ds[i]->live && !v->ds[i]->p.pending)
            checks[n++].e = v->ds[i];
    pthread_mutex_unlock(&v->lock);
    if (!checks)
        return cfs_err_oom(err);
    /* Outside the lock: a view may be large, and only this refresh (v->refreshing) changes an
     * entry's view or its source fields. */
    const char *folder = view_folder(v);
    int rc = 0;
    size_t moved = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        ds_entry *e = checks[i].e;
        rc = look_again(folder, &e->p, &e->session, &checks[i].now, &checks[i].moved, err);
        moved += checks[i].moved;
    }
    pthread_mutex_lock(&v->lock);
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (checks[i].moved && checks[i].e->live)
            cfs_vol_session_adopt(v, checks[i].e, &checks[i].now, stale);
    if (rc == 0 && moved && cfs_vol_publish_catalog(v, stale) < 0)
        rc = cfs_err_oom(err);
    pthread_mutex_unlock(&v->lock);
    for (size_t i = 0; i < n; i++)
        cfs_session_clear(&checks[i].now);
    free(checks);
    return rc;
}

json_t *cfs_vol_session_status(const cfs_volume *v, const ds_entry *e)
{
    const cfs_session *s = &e->session;
    if (!s->file)
        return NULL;
    char *shown = cfs_text_shown(cfs_vol_shown_source(v, s->file));
    char *reason = s->refused ? cfs_text_shown(s->refused) : NULL;
    json_t *j = json_pack("{s:s?, s:b}", "file", shown, "listed", e->session_ino != 0);
    if (j && e->session_ino) {
        json_object_set_new(j, "path", json_string(v->v[e->session_ino - 1].name));
        json_object_set_new(j, "bytes", json_integer((json_int_t)s->len));
        json_object_set_new(j, "sha256", json_string(s->sha256));
    } else if (j && reason) {
        json_object_set_new(j, "reason", json_string(reason));
    }
    free(shown);
    free(reason);
    return j;
}
