/* Host staging of device buffers (see device_staged.h): for calls the
 * device path does not take (a reduction without a kernel for its dtype,
 * one of its buffers host memory, groups past the kernels' sources), the
 * call's device buffers are copied to host memory at its first exchange,
 * every exchange runs on the host paths, and the output is copied back at
 * the call's end.  Always a candidate for a device call: the table tries
 * the device path first. */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "core/context.h"
#include "core/debug.h"
#include "core/fail.h"
#include "device/gpu.h"
#include "engine/call.h"
#include "paths/device_staged.h"

/* The call's own state (k->path_state), at the start of its host memory
 * (from the device layer's pool): the device buffers the copies stand for;
 * the copies follow, a cache line on. */
struct stage {
    void *dev_in, *dev_out;
};

/* Why the device path left the call, for SHMESH_DEBUG=paths. */
static const char *reason(const struct call *k)
{
    const struct flow *f = &k->f;
    if ((k->in_kind == MEM_DEVICE) != (f->out_bytes && k->out_kind == MEM_DEVICE))
        return "one of its buffers is host memory";
    if (f->kind == FLOW_TRANSFERS)
        return "the op has no device path";
    if (f->kind == FLOW_REDUCE && k->g.n > RT_MAX_SRC)
        return "the kernels take at most 64 members";
    if (f->kind == FLOW_REDUCE)
        return "no device kernel for this reduction and dtype";
    return "no device path for it";
}

/* The rank's device runtime failed in the middle of a call: its peers would
 * wait for it in vain, so the job is told (docs/devices.md). */
static int runtime_failed(struct call *k, const char *what)
{
    return fail_job(k->c, SHMESH_ERR_SYSTEM, "%s (call #%" PRIu64 "): %s: %s", k->name, k->seq,
                    what, k->c->dev->rt->last_error());
}

/* The call's end: the host output copied back to device memory (when the
 * call succeeded), the host memory given back, the flow's buffers the
 * device ones again. */
static int stage_end(struct call *k, int rc)
{
    struct device_layer *d = k->c->dev;
    struct stage *s = k->path_state;
    if (!rc && s->dev_out != k->f.out.data && k->f.out_bytes && k->d.out_device &&
        (d->rt->copy(s->dev_out, k->f.out.data, (size_t)k->f.out_bytes, d->stream) ||
         d->rt->sync(d->stream)))
        rc = ctx_fail(k->c, SHMESH_ERR_SYSTEM,
                      "%s (call #%" PRIu64 "): copying the result back to device memory: "
                      "%s; the call completed on the other members",
                      k->name, k->seq, d->rt->last_error());
    k->f.in.data = s->dev_in;
    k->f.out.data = s->dev_out;
    device_host_give(k->c, DEVICE_POOL_STAGING, s);
    k->path_state = NULL;
    k->path_end = NULL;
    return rc;
}

/* Copies the device input (and for ops that leave parts of the output
 * alone, the output) to host memory and points the flow at the copies. */
static int stage_in(struct call *k)
{
    shmesh_ctx *c = k->c;
    struct device_layer *d = c->dev;
    struct flow *f = &k->f;
    bool in_dev = k->in_kind == MEM_DEVICE, out_dev = k->out_kind == MEM_DEVICE;
    bool same = in_dev && out_dev && f->out.data == f->in.data && f->out_bytes == f->in_bytes;
    uint64_t in_b =
        in_dev ? (f->in_bytes + SEG_CACHE_LINE - 1) / SEG_CACHE_LINE * SEG_CACHE_LINE : 0;
    uint64_t out_b = out_dev && !same ? f->out_bytes : 0;
    struct stage *s =
        in_b + out_b <= UINT64_MAX - SEG_CACHE_LINE
            ? device_host_take(c, DEVICE_POOL_STAGING, SEG_CACHE_LINE + in_b + out_b)
            : NULL;
    if (!s)
        return fail_job(c, SHMESH_ERR_NOMEM,
                        "%s (call #%" PRIu64 "): out of memory for %" PRIu64
                        " bytes of host staging",
                        k->name, k->seq, in_b + out_b);
    unsigned char *h = (unsigned char *)s + SEG_CACHE_LINE;
    *s = (struct stage){f->in.data, f->out.data};
    k->path_state = s;
    k->path_end = stage_end;
    /* Ragged exchanges leave the rows nobody sends alone: the host copy
     * starts as the device output is. */
    bool keep_out = out_dev && !same && f->kind == FLOW_TRANSFERS;
    if ((in_dev && d->rt->copy(h, f->in.data, (size_t)f->in_bytes, d->stream)) ||
        (keep_out && d->rt->copy(h + in_b, f->out.data, (size_t)f->out_bytes, d->stream)) ||
        d->rt->sync(d->stream))
        return runtime_failed(k, "copying its device buffers to host memory");
    if (f->zero_out && out_dev)
        memset(same ? h : h + in_b, 0, (size_t)f->out_bytes);
    if (in_dev) {
        f->in.data = h;
        k->in_kind = MEM_HOST;
    }
    if (out_dev) {
        f->out.data = same ? h : h + in_b;
        k->out_kind = MEM_HOST;
    }
    if (k->rebind) /* an op that keeps its own copies of the arrays takes the new ones */
        k->rebind(k);
    d->stats.staged_calls++;
    if (c->debug & DEBUG_PATHS)
        debug_line(c, "call #%" PRIu64 " %s: device buffers staged through host memory (%s)",
                   k->seq, k->name, reason(k));
    return 0;
}

/* Every device call is a candidate: the device path, before this one in the
 * table, takes those it can. */
static bool staged_candidate(const struct call *k)
{
    (void)k;
    return true;
}

/* At the call's first exchange (every later one finds host buffers and
 * chooses among the host paths itself).  A call whose staging failed ran
 * no path: none is recorded for it. */
static int staged_step(struct call *k)
{
    int rc = stage_in(k);
    if (rc) {
        k->path = NULL;
        return rc;
    }
    return path_on_host(k);
}

const struct path path_device_staged = {
    .name = "device-staged",
    .kinds = MEM_DEVICE,
    .hands_over = true,
    .candidate = staged_candidate,
    .step = staged_step,
};
