/* Op numbers: the op table's rows (shm/optable.h) numbered from 1, 0 for
 * none, as the segment carries them: a status word's op field, a trace
 * event's op byte, a call description's op word.  Below every layer of the
 * library, since the status block and the trace (lib/trace/) write them
 * too. */
#ifndef SHMESH_SHM_OP_NUMBERS_H
#define SHMESH_SHM_OP_NUMBERS_H

#include <stdint.h>

#include "shm/layout.h"
#include "shm/optable.h"

enum call_op {
    OP_NONE = 0, /* a zeroed description */
#define OP_ENUM(ID, ...) OP_##ID,
    SHMESH_OPS(OP_ENUM)
#undef OP_ENUM
    OP_COUNT
};

_Static_assert(OP_COUNT - 1 <= SEG_STATUS_OP_MASK, "op numbers fit seg_status.call's op field");
_Static_assert(OP_COUNT - 1 < 1ull << (8 * sizeof(((struct seg_trace_event *)0)->op)),
               "op numbers fit seg_trace_event.op");

#endif
