/* Single copy: reading straight out of another rank's private memory
 * (process_vm_readv), where the kernel allows it: the path table's entry,
 * and what the context does at start-up to learn whether it may. */
#ifndef SHMESH_PATHS_SINGLE_COPY_H
#define SHMESH_PATHS_SINGLE_COPY_H

#include <stdbool.h>

#include "engine/path.h"
#include "shmesh.h"

/* The path table's entry (engine/path.c). */
extern const struct path path_single_copy;

/* Before joining: publishes a word of this rank's memory for peers to try
 * and, when single copy may be used (`allowed`, more than one rank), lets
 * the job's processes read this one where Yama would not (PR_SET_PTRACER
 * naming the launcher, never "any process"). */
void cma_publish(shmesh_ctx *c, bool allowed);
/* After every rank joined: whether this rank may read every peer's memory
 * (`allowed` false: this rank refuses, SHMESH_CMA=0).  A rank that may not
 * takes back what cma_publish allowed. */
void cma_probe(shmesh_ctx *c, bool allowed);

#endif
