#include "schedule.h"

#include <stdlib.h>

enum { TO_MAKE, MAKING, LANDED };

int cfs_schedule_init(cfs_schedule *s, size_t n)
{
    cfs_schedule_free(s);
    s->state = calloc(n ? n : 1, 1);
    s->wanted = calloc(n ? n : 1, sizeof *s->wanted);
    if (!s->state || !s->wanted) {
        cfs_schedule_free(s);
        return -1;
    }
    s->n = n;
    return 0;
}

void cfs_schedule_free(cfs_schedule *s)
{
    free(s->state);
    free(s->wanted);
    *s = (cfs_schedule){0};
}

bool cfs_schedule_ready(cfs_schedule *s, size_t first, size_t last)
{
    bool ready = true;
    for (size_t p = first; p <= last && p < s->n; p++) {
        if (s->state[p] == LANDED)
            continue;
        ready = false;
        if (s->wanted[p] == 0)
            s->wanted[p] = ++s->clock;
    }
    return ready;
}

/* The wanted parts are few (what readers wait for now): a scan is cheaper than keeping a heap
 * that every landing must update. */
size_t cfs_schedule_claim(cfs_schedule *s)
{
    size_t pick = s->n;
    for (size_t p = s->next; p < s->n; p++)
        if (s->state[p] == TO_MAKE && s->wanted[p] &&
            (pick == s->n || s->wanted[p] < s->wanted[pick]))
            pick = p;
    if (pick == s->n) {
        while (s->next < s->n && s->state[s->next] != TO_MAKE)
            s->next++;
        pick = s->next;
    }
    if (pick < s->n)
        s->state[pick] = MAKING;
    return pick;
}

void cfs_schedule_land(cfs_schedule *s, size_t part)
{
    if (part < s->n && s->state[part] != LANDED) {
        s->state[part] = LANDED;
        s->landed++;
    }
}
