/* Ranks made different calls: both explained, the context poisoned, the
 * job told (engine/desc.h). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/context.h"
#include "core/fail.h"
#include "core/settings.h"
#include "engine/desc.h"

int call_mismatch(shmesh_ctx *c, uint64_t seq, const struct call_desc *mine, int other_rank,
                  const struct call_desc *theirs)
{
    /* Other hashed settings: which, from the values the peer published at
     * start-up, when they are the ones its call's hash was made of (they
     * are untrusted: only compared and printed as numbers). */
    char settings[512];
    const char *differ = NULL;
    if (theirs && theirs->tuning != mine->tuning) {
        uint64_t v[SETTINGS_HASHED];
        memcpy(v, seg_ctrl(c->seg, other_rank)->tuning, sizeof v);
        bool published = settings_hashed_hash(v) == theirs->tuning;
        settings_hashed_text(settings, sizeof settings, c->tuning_values, c->job_rank,
                             published ? v : NULL, ctx_job_rank_of(c, other_rank));
        differ = settings;
    }
    /* Both calls named, cut to fit (the context's message gets "rank N: "). */
    char text[CTX_ERR_MAX - 16], reason[SEG_REASON_MAX];
    int who = ctx_job_rank_of(c, other_rank); /* messages name the job's ranks */
    call_mismatch_text(text, sizeof text, seq, mine, who, theirs, differ);
    ctx_poison(c, SHMESH_ERR_MISMATCH, "%s", text);
    /* Tell the whole job: ranks of other groups may never meet this one. */
    int n = snprintf(reason, sizeof reason, "rank %d: ", c->job_rank);
    call_mismatch_text(reason + n, sizeof reason - (size_t)n, seq, mine, who, theirs,
                       differ);
    seg_abort(c->seg, SEG_CAUSE_MISMATCH, c->rank, 0, reason);
    return SHMESH_ERR_MISMATCH;
}
