/* Host staging of device buffers (see device.h): for calls the device path
 * does not take (a reduction without a kernel for its dtype, ragged
 * exchanges, groups past the kernels' sources), the call runs on host copies
 * of its device buffers. */
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/debug.h"
#include "core/fail.h"
#include "device/gpu.h"
#include "engine/call.h"

/* A staging buffer: its capacity, then the bytes (on a cache line of
 * their own). */
struct stage_buf {
    uint64_t cap;
    unsigned char pad[SEG_CACHE_LINE - sizeof(uint64_t)];
    unsigned char data[];
};

/* Host memory for a call's copies: the spare the layer kept when it is
 * large enough (taken atomically: a call may be staged on the progress
 * thread while another ends on the caller's), else a new one.  The spare
 * keeps its pages, so a trainer's repeated staged calls fault memory in
 * once, not at every call (on an H100, a 64 MiB bfloat16 psum spent most of
 * 164 ms faulting in a fresh malloc's pages: docs/devices.md). */
static struct stage_buf *stage_take(struct device_layer *d, uint64_t bytes)
{
    struct stage_buf *b = __atomic_exchange_n(&d->stage_spare, NULL, __ATOMIC_ACQ_REL);
    if (b && b->cap >= bytes)
        return b;
    free(b);
    if (bytes > SIZE_MAX - sizeof *b)
        return NULL;
    b = malloc(sizeof *b + (size_t)bytes);
    if (b)
        b->cap = bytes;
    return b;
}

/* Back as the spare (the larger one kept when another came back first). */
static void stage_give(struct device_layer *d, struct stage_buf *b)
{
    struct stage_buf *old = __atomic_exchange_n(&d->stage_spare, b, __ATOMIC_ACQ_REL);
    if (old && old->cap > b->cap) {
        b = __atomic_exchange_n(&d->stage_spare, old, __ATOMIC_ACQ_REL);
        old = b;
    }
    free(old);
}

void device_stage_release(struct device_layer *d)
{
    free(__atomic_exchange_n(&d->stage_spare, NULL, __ATOMIC_ACQ_REL));
}

/* Why the device path left the call, for SHMESH_DEBUG=paths. */
static const char *reason(const struct call *k)
{
    const struct flow *f = &k->f;
    if ((k->in_kind == MEM_DEVICE) != (f->out_bytes && k->out_kind == MEM_DEVICE))
        return "one of its buffers is host memory";
    if (f->kind == FLOW_STREAMS)
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

int device_stage_in(struct call *k)
{
    shmesh_ctx *c = k->c;
    struct device_layer *d = c->dev;
    struct flow *f = &k->f;
    bool in_dev = k->in_kind == MEM_DEVICE, out_dev = k->out_kind == MEM_DEVICE;
    bool same = in_dev && out_dev && f->out.data == f->in.data && f->out_bytes == f->in_bytes;
    uint64_t in_b =
        in_dev ? (f->in_bytes + SEG_CACHE_LINE - 1) / SEG_CACHE_LINE * SEG_CACHE_LINE : 0;
    uint64_t out_b = out_dev && !same ? f->out_bytes : 0;
    struct stage_buf *buf = stage_take(d, in_b + out_b);
    if (!buf)
        return fail_job(c, SHMESH_ERR_NOMEM,
                        "%s (call #%" PRIu64 "): out of memory for %" PRIu64
                        " bytes of host staging",
                        k->name, k->seq, in_b + out_b);
    unsigned char *h = buf->data;
    k->staged = buf;
    k->dev_in = f->in.data;
    k->dev_out = f->out.data;
    /* Ragged exchanges leave the rows nobody sends alone: the host copy
     * starts as the device output is. */
    bool keep_out = out_dev && !same && f->kind == FLOW_STREAMS;
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
    if (k->rebind)
        k->rebind(k);
    d->stats.staged_calls++;
    if (c->debug & DEBUG_PATHS)
        debug_line(c, "call #%" PRIu64 " %s: device buffers staged through host memory (%s)",
                   k->seq, k->name, reason(k));
    return 0;
}

int device_stage_out(struct call *k)
{
    struct device_layer *d = k->c->dev;
    if (k->dev_out != k->f.out.data && k->f.out_bytes && k->d.out_device &&
        (d->rt->copy(k->dev_out, k->f.out.data, (size_t)k->f.out_bytes, d->stream) ||
         d->rt->sync(d->stream)))
        return ctx_fail(k->c, SHMESH_ERR_SYSTEM,
                        "%s (call #%" PRIu64 "): copying the result back to device memory: "
                        "%s; the call completed on the other members",
                        k->name, k->seq, d->rt->last_error());
    return 0;
}

void device_stage_free(struct call *k)
{
    if (!k->staged)
        return;
    stage_give(k->c->dev, k->staged);
    k->staged = NULL;
    k->f.in.data = k->dev_in;
    k->f.out.data = k->dev_out;
}
