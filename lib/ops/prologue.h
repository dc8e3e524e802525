/* The call prologue: what every mesh collective does before its data moves
 * — enter the call, resolve the axes and the group, check the arrays, and
 * describe the call. */
#ifndef SHMESH_OPS_PROLOGUE_H
#define SHMESH_OPS_PROLOGUE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/bytes.h"
#include "engine/call.h"
#include "mesh/mesh.h"
#include "shmesh.h"

/* Starts call k of `op` on mesh m: the context is usable, the axes name the
 * mesh's dimensions (*a), k's group is this device's (sub)group after
 * validating axis_index_groups (`equal_groups`: all the same size), and `in`
 * and `out` (unless NULL) are well-formed arrays.  Every failure here is
 * local (SHMESH_ERR_INVALID, or the poisoned context's error). */
int coll_open(struct call *k, shmesh_mesh *m, enum call_op op, const char *axes,
              const shmesh_groups *gs, bool equal_groups, struct axes *a,
              const shmesh_array *in, const shmesh_array *out);
/* Both arrays well-formed (array_check); element counts out. */
int coll_arrays(struct call *k, const shmesh_array *in, const char *in_name,
                const shmesh_array *out, const char *out_name, uint64_t *n_in, uint64_t *n_out);
/* Fails unless `out` and `in` are the same buffer or do not overlap. */
int coll_no_overlap(struct call *k, const void *in, uint64_t in_bytes, const void *out,
                    uint64_t out_bytes, bool same_allowed);
/* The arguments were accepted: the flow's arrays are described in the call
 * and classified (buffers no path takes are refused). */
int coll_ready(struct call *k);

#endif
