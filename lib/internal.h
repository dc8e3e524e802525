/* libshmesh internals shared by lib/ files; never installed. */
#ifndef SHMESH_LIB_INTERNAL_H
#define SHMESH_LIB_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "segment.h"
#include "shmesh.h"
#include "wait.h"

#define CTX_ERR_MAX 512
#define BOUNCE_BYTES (64u << 10)

/* The collective a call is (struct call_desc.op). */
enum call_op {
    OP_BARRIER = 1,
    OP_WORLD_SUM,
    OP_FINALIZE,
    OP_MESH_CREATE,
    OP_PSUM,
    OP_PMAX,
    OP_PMIN,
    OP_PMEAN,
    OP_PARGMAX,
    OP_PARGMIN,
    OP_ALL_GATHER,
    OP_PSUM_SCATTER,
    OP_ALL_TO_ALL,
    OP_PSWAPAXES,
    OP_RAGGED_ALL_TO_ALL,
    OP_PPERMUTE,
    OP_PSHUFFLE,
    OP_PBROADCAST,
};

/* What a call publishes in its first window.  Ranks compare a hash of it;
 * the fields are read back only to explain a mismatch.  Zero-filled before
 * use so padding hashes the same everywhere. */
struct call_desc {
    uint32_t op;
    int32_t mesh;   /* mesh id, -1 for world-wide calls */
    uint32_t dtype, out_dtype;
    int32_t ndim, out_ndim;
    int64_t shape[SHMESH_MAX_NDIM], out_shape[SHMESH_MAX_NDIM];
    int64_t param[4];    /* op-specific: axes, tiled, source, ... */
    uint64_t count;      /* world_sum */
    uint64_t extra_hash; /* groups, permutations, mesh layout */
    char axes[64];
    char groups[96];     /* axis_index_groups as text ("" without), maybe cut short */
    uint64_t tuning;     /* the thresholds that choose algorithms: every rank must agree */
};
_Static_assert(sizeof(struct call_desc) <= SEG_CALL_DESC_MAX, "call description too large");

/* This rank's share of the shared heap (heap.c). */
struct heap_block {
    uint64_t off, len;
};
struct heap {
    unsigned char *base;
    uint64_t size;
    struct heap_block *free, *used; /* sorted by offset */
    int nfree, nused, cap_free, cap_used;
};

/* A group: the ranks a collective runs among on this device, by position. */
struct group {
    int n;
    int me;          /* this device's position */
    const int *ranks;
};

struct shmesh_ctx {
    int rank;
    int world;
    struct seg *seg;
    struct notify *notify;
    struct seg_waiter waiter;
    struct seg_ctrl *me;
    uint64_t calls;   /* collective calls begun; the current one's number */
    uint32_t window;  /* the next window's index within the current call */
    /* This rank's two slot buffers: which window each holds and which ranks
     * may still be reading it (they must move past it before it is reused). */
    int next_buf;
    uint64_t buf_tag[2];
    int *buf_readers[2];
    int buf_nreaders[2];
    const char *op;   /* the public function being run, for messages */
    int poison;       /* 0, or the error every later call returns */
    int next_mesh_id;
    struct heap heap;
    /* Scratch, world entries each, in one allocation. */
    void *scratch;
    int *all_ranks;   /* 0..world-1 */
    const void **srcs;
    struct seg_slot_hdr **hdrs;
    uint64_t *xoff_to, *xlen_to, *xoff_from, *xlen_from, *xtotal;
    uint64_t *seen;   /* the latest window seen posted by each rank */
    unsigned char **zin, **zout; /* members' buffers, for zero-copy */
    uint64_t *cin, *cout;        /* members' buffer addresses, for single copy */
    bool *peer_cma;              /* members that may read every peer's memory */
    bool cma_ok;                 /* this rank may */
    uint64_t probe_word;
    uint64_t cma_min;            /* SHMESH_CMA_MIN */
    uint64_t tuning;             /* hash of the thresholds: ranks must agree */
    unsigned char *bounce;       /* BOUNCE_BYTES of private scratch */
    uint64_t zc_min;  /* the smallest call that may go zero-copy (SHMESH_ZC_MIN) */
    uint64_t rsag_min; /* the smallest staged reduction that takes rsag (SHMESH_RSAG_MIN) */
    int *perm_dest, *perm_src;
    char err[CTX_ERR_MAX];
};

/* error.c */
int ctx_fail(shmesh_ctx *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* As ctx_fail, and every later call returns `code`. */
int ctx_poison(shmesh_ctx *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void init_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* sync.c: entering and beginning calls, and failures.
 * sync_enter: a NULL or poisoned context fails here, before arguments are
 * looked at.  sync_begin: the arguments were accepted; the call counts from
 * now on (a refused call is not made, so it must not shift the call numbers
 * that ranks compare). */
int sync_enter(shmesh_ctx *c, const char *op);
int sync_begin(shmesh_ctx *c);
/* Turns a seg_wait_*() failure into a poisoned context and its error. */
int sync_wait_failed(shmesh_ctx *c, int rc, int culprit, const char *waiting_for);
/* Both calls explained, the context poisoned, and the job told: every rank
 * returns SHMESH_ERR_MISMATCH from its next wait or call. */
int sync_mismatch(shmesh_ctx *c, const struct call_desc *mine, int other_rank,
                  const struct call_desc *theirs);
void call_describe(const struct call_desc *d, uint64_t call, char *buf, size_t len);
/* "shmesh_psum", ...; NULL for an unknown op. */
const char *call_op_name(enum call_op op);
uint64_t hash_bytes(const void *p, size_t n, uint64_t seed);
/* What ranks compare to know they make the same call. */
uint64_t call_hash(const struct call_desc *d);

/* exchange.c: the one data path of every collective.
 *
 * A call runs in windows.  In each window every member of the group writes
 * up to one payload of its outgoing stream into its own slot buffer, posts
 * its progress, waits for the other members' posts of the same window, and
 * reads what is meant for it from their buffers.  A sender's stream is
 * either one `broadcast` stream that every member reads whole, or the
 * concatenation of one segment per destination position.  The receiving
 * side either copies (`recv`) what each member sent it, or `reduce`s the
 * same range of every member's segment at once, in position order. */
struct xchg;
typedef uint64_t (*xchg_bytes_fn)(const struct xchg *x, int from, int to);
typedef void (*xchg_pack_fn)(const struct xchg *x, int to, uint64_t off, uint64_t len, void *dst);
typedef void (*xchg_recv_fn)(const struct xchg *x, int from, uint64_t off, const void *src,
                             uint64_t len);
typedef void (*xchg_reduce_fn)(const struct xchg *x, uint64_t off, const void *const *src,
                               uint64_t len);

/* Zero-copy: when every member's buffers lie in the shared heap (and the
 * call moves at least SHMESH_ZC_MIN bytes), `direct` moves the data itself,
 * given every member's input (and output) as pointers in this process;
 * otherwise the staged windows run.  Members decide alike. */
typedef void (*xchg_direct_fn)(const struct xchg *x, unsigned char *const *in,
                               unsigned char *const *out);
/* Single copy (CMA): when the buffers are not all in the heap but every
 * member may read the others' memory, `cma` moves the data itself, given
 * every member's input and output addresses (in their own processes). */
typedef int (*xchg_cma_fn)(const struct xchg *x, const uint64_t *in_addr,
                           const uint64_t *out_addr);

struct xchg {
    shmesh_ctx *c;
    struct group g;
    bool broadcast;       /* bytes/pack see to = -1 */
    uint64_t unit;        /* window payloads hold whole units of this many bytes */
    xchg_bytes_fn bytes;  /* from, to: positions; what `from` sends `to` */
    xchg_pack_fn pack;    /* this device's segment for `to`, bytes [off, off+len) */
    xchg_recv_fn recv;    /* bytes [off, off+len) of what `from` sent this device */
    xchg_reduce_fn reduce;
    xchg_direct_fn direct; /* NULL: never zero-copy */
    xchg_cma_fn cma;       /* NULL: never single copy */
    /* When set, the staged path runs this instead of the streams. */
    int (*staged)(struct xchg *x, const struct call_desc *desc);
    const void *zin;      /* this member's input and output for `direct` */
    uint64_t zin_bytes;
    void *zout;
    uint64_t zout_bytes;
    bool zout_shared;     /* `direct` touches other members' outputs too */
    void *op;             /* the operation's own state */
};

/* bytes callback for exchanges that carry no data (barrier-like steps). */
uint64_t xchg_no_bytes(const struct xchg *x, int from, int to);

/* The windows themselves, for algorithms streams do not express:
 * win_open reclaims this rank's next slot buffer and returns its payload
 * (win_capacity bytes) to fill; win_exchange posts it (with `desc` for a
 * call's first window), waits for every member's same window, and leaves
 * their buffers in c->hdrs by position (seg_payload() gives the data, valid
 * until this rank's next win_exchange but one). */
uint64_t win_capacity(const shmesh_ctx *c);
unsigned char *win_open(shmesh_ctx *c, int *rc);
int win_exchange(shmesh_ctx *c, const struct group *g, const struct call_desc *desc);

/* Runs the exchange; `desc` (non-NULL for a call's first exchange) is
 * published in the first window and compared across the group. */
int xchg_run(struct xchg *x, const struct call_desc *desc);

/* array.c: checking and describing arrays. */
/* "float32[4,3]" ("float32[]" for a scalar). */
void shape_format(char *buf, size_t len, shmesh_dtype dt, int ndim, const int64_t *shape);
/* A well-formed array: known dtype, ndim 0..SHMESH_MAX_NDIM, dimensions >= 0,
 * data present when it holds elements.  *elems receives the element count. */
int array_check(shmesh_ctx *c, const char *op, const char *what, const shmesh_array *a,
                uint64_t *elems);
/* `a` must have exactly this dtype and shape; the message gives both. */
int array_expect(shmesh_ctx *c, const char *op, const char *what, const shmesh_array *a,
                 shmesh_dtype dt, int ndim, const int64_t *shape);
/* Python-style axis: -ndim..ndim-1 becomes 0..ndim-1. */
int axis_canon(shmesh_ctx *c, const char *op, const char *what, int axis, int ndim, int *out);

/* box.c: an N-d block of a C-contiguous array, read or written in the
 * block's own row-major ("packed") order. */
struct box {
    int ndim;
    int64_t dim[SHMESH_MAX_NDIM];   /* the array's shape */
    int64_t start[SHMESH_MAX_NDIM]; /* the block's corner */
    int64_t ext[SHMESH_MAX_NDIM];   /* the block's extent */
    size_t esz;
};
/* The whole array; callers then narrow start/ext of some dimensions. */
void box_whole(struct box *b, int ndim, const int64_t *shape, size_t esz);
/* Block [start, start+ext) along dimension `dim`, whole along the others,
 * simplified. */
void box_slab(struct box *b, const shmesh_array *a, int dim, int64_t start, int64_t ext);
/* Merges trailing dimensions the block spans completely, so copies run long. */
void box_simplify(struct box *b);
uint64_t box_elems(const struct box *b);
/* Elements [first, first+count) of the block, in packed order. */
void box_read(const struct box *b, const void *array, uint64_t first, uint64_t count, void *dst);
/* Calls run() once per stretch of packed elements [first, first+count) that
 * is contiguous in the array: its array offset, its packed offset (from
 * `first`) and its length, in elements. */
void box_runs(const struct box *b, uint64_t first, uint64_t count,
              void (*run)(void *arg, uint64_t array_off, uint64_t packed_off, uint64_t len),
              void *arg);
void box_write(const struct box *b, void *array, uint64_t first, uint64_t count, const void *src);

/* barrier.c: one world-wide step with no data (barrier, finalize). */
int world_step(shmesh_ctx *c, enum call_op op);

/* heap.c */
int heap_init(shmesh_ctx *c);
void heap_fini(shmesh_ctx *c);
/* Where [p, p+len) lies in the segment, when it lies within the heap. */
bool heap_offset(const shmesh_ctx *c, const void *p, uint64_t len, uint64_t *off);
/* The heap range a peer named by offset, checked against the heap's bounds;
 * NULL when it leaves them. */
void *heap_at(const shmesh_ctx *c, uint64_t off, uint64_t len);

/* cma.c: copies straight out of another rank's private memory
 * (process_vm_readv), where the kernel allows it. */
void cma_publish(shmesh_ctx *c); /* before joining */
void cma_probe(shmesh_ctx *c);   /* after every rank joined */
/* `len` bytes at address `addr` of rank r into dst.  A failure poisons the
 * context and tells the job (its peers would otherwise wait for it). */
int cma_read(shmesh_ctx *c, int r, uint64_t addr, void *dst, uint64_t len);
/* Elements [first, first+count) of block `b` of the array at `addr` in rank
 * r, packed into dst. */
int cma_read_box(shmesh_ctx *c, int r, uint64_t addr, const struct box *b, uint64_t first,
                 uint64_t count, void *dst);

/* dtype.c */
bool dtype_valid(shmesh_dtype dt);
bool dtype_is_float(shmesh_dtype dt);
bool dtype_is_int(shmesh_dtype dt); /* signed or unsigned integer, not bool */

/* reduce.c: dst = src[0] op src[1] op ... (in that order), element-wise. */
enum red_op { RED_SUM, RED_MAX, RED_MIN, RED_MEAN, RED_ARGMAX, RED_ARGMIN };
/* in_dt: the sources' dtype; out_dt: dst's (differs for bool sums, means of
 * integers, and arg reductions, which write int32 indices 0..nsrc-1 or
 * INT32_MAX).  `mean_n` divides for RED_MEAN. */
void reduce_run(enum red_op op, shmesh_dtype in_dt, shmesh_dtype out_dt, void *dst,
                const void *const *src, int nsrc, size_t n, int mean_n);
void reduce_sum(shmesh_dtype dt, void *dst, const void *const *src, int nsrc, size_t n);
/* reductions.c: the zero-copy reduction: this member reduces its share of the
 * elements from every member's input and writes it into every member's output. */
void direct_reduce(const struct xchg *x, enum red_op op, shmesh_dtype in_dt, shmesh_dtype out_dt,
                   uint64_t count, int mean_n, unsigned char *const *in, unsigned char *const *out);

/* reductions.c: the single-copy reduction (process_vm_readv). */
int cma_reduce(const struct xchg *x, enum red_op op, shmesh_dtype in_dt, shmesh_dtype out_dt,
               uint64_t count, int mean_n, const unsigned char *in, unsigned char *out,
               const uint64_t *in_addr, const uint64_t *out_addr);

/* stream.c: large outputs written around the cache (no read for ownership
 * of lines that are only overwritten), as glibc's memcpy does for large
 * copies.  stream_fence() before anyone is told the data is there. */
#define STREAM_MIN (8u << 20)
void stream_copy(unsigned char *dst, const unsigned char *src, size_t len);
void stream_fence(void);

/* rsag.c: the staged reduction for large arrays (reduce-scatter, then
 * all-gather); `in` may be `out` when the dtypes have the same size. */
int rsag_run(shmesh_ctx *c, const struct group *g, const struct call_desc *desc, enum red_op op,
             shmesh_dtype in_dt, shmesh_dtype out_dt, const unsigned char *in, unsigned char *out,
             uint64_t count, int mean_n);
/* Which staged reduction a call of `bytes` among `n` members uses. */
bool use_rsag(const shmesh_ctx *c, uint64_t bytes, int n);

#endif
