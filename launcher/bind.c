/* Where each rank runs (--bind-to): a CPU of its own (core; with
 * :overload-allowed, more ranks than CPUs, the CPUs taken in turn); near its GPU,
 * or on the NUMA node of its slots (numa, the default: each rank starts on a
 * CPU of its own there, where there are enough, and may move); or anywhere
 * (none).
 * Decided before any fork, so that a refusal comes before anything starts
 * and -v can say it; each child applies its part before exec.  Binding is
 * best effort: what the machine does not say (no sysfs entry for the GPU)
 * or does not allow leaves the rank where the scheduler puts it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher.h"
#include "numa_place.h"

static void set_env_int(const char *name, int v)
{
    char buf[16];
    snprintf(buf, sizeof buf, "%d", v);
    setenv(name, buf, 1);
}

int bind_plan(struct job *j, const cpu_set_t *allowed)
{
    /* Not a core per rank by default, unlike mpirun: on a shared machine a
     * rank pinned beside a busy process cannot move away from it (measured:
     * 60-600 us per small psum instead of 1-5 us; docs/performance.md). */
    if (j->o.bind == BIND_AUTO)
        j->o.bind = BIND_NUMA;
    if (j->o.bind == BIND_CORE) {
        int ncpus = allowed ? CPU_COUNT(allowed) : 0;
        if (ncpus < j->o.np && (!j->o.bind_overload || ncpus < 1)) {
            fprintf(stderr,
                    PROG ": --bind-to core needs a core per rank: %d ranks, %d cores allowed "
                         "(--bind-to core:overload-allowed puts several on a core)\n",
                    j->o.np, ncpus);
            return -1;
        }
        /* Rank r on the (r mod ncpus)-th CPU allowed: with more ranks than
         * CPUs, neighbours in rank order on different CPUs, and each CPU's
         * ranks taking turns on it (measured: docs/shmesh-run.1). */
        j->cpus = calloc((size_t)j->o.np, sizeof *j->cpus);
        for (int cpu = 0, r = 0; j->cpus && r < j->o.np; cpu = (cpu + 1) % CPU_SETSIZE)
            if (CPU_ISSET(cpu, allowed))
                j->cpus[r++] = cpu;
        return 0;
    }
    const struct gpu_env *g = &j->gpus;
    if (j->o.bind != BIND_NUMA || !g->count || !g->found || !allowed)
        return 0;
    /* Near its GPU: the CPUs the GPU's PCI device names local, those the
     * launcher may use (a cpuset or taskset may allow fewer), and its node
     * for the rank's slots.  A rank holding several GPUs goes near its first. */
    j->gpu_of = calloc((size_t)j->o.np, sizeof *j->gpu_of);
    j->slot_nodes = calloc((size_t)j->o.np, sizeof *j->slot_nodes);
    j->near = calloc((size_t)g->found, sizeof *j->near);
    if (!j->gpu_of || !j->slot_nodes || !j->near) {
        bind_free(j); /* no binding near GPUs rather than no job */
        return 0;
    }
    for (int i = 0; i < g->found; i++) {
        CPU_ZERO(&j->near[i]);
        if (g->info[i].has_cpus)
            CPU_AND(&j->near[i], &g->info[i].cpus, allowed);
    }
    for (int r = 0; r < j->o.np; r++) {
        char why[160];
        int i = gpus_find(g, gpus_first(g, r, j->o.devices), why, sizeof why);
        j->gpu_of[r] = i;
        j->slot_nodes[r] = i >= 0 ? g->info[i].node : -1;
    }
    return 0;
}

void bind_free(struct job *j)
{
    free(j->cpus);
    free(j->gpu_of);
    free(j->near);
    free(j->slot_nodes);
    j->cpus = j->gpu_of = j->slot_nodes = NULL;
    j->near = NULL;
}

void bind_rank(const struct job *j, int rank, int node)
{
    if (j->o.bind == BIND_CORE && j->cpus) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(j->cpus[rank], &one);
        if (sched_setaffinity(0, sizeof one, &one) == 0)
            set_env_int("SHMESH_CPU", j->cpus[rank]);
        return;
    }
    if (j->o.bind != BIND_NUMA)
        return;
    int g = j->gpu_of ? j->gpu_of[rank] : -1;
    if (g >= 0 && j->gpus.info[g].has_cpus) {
        /* None of its CPUs allowed: left where it is, not moved away. */
        if (CPU_COUNT(&j->near[g]) > 0)
            sched_setaffinity(0, sizeof j->near[g], &j->near[g]);
    } else if (node >= 0) {
        /* Its slots' node, which is its GPU's when that is known. */
        numa_place_run_on(node); /* best effort: a cpuset may forbid it */
    }
    /* Where among those CPUs it starts: shmesh_init moves it there and
     * leaves it free to move (numa_place.h: forked ranks otherwise share
     * a CPU at first). */
    int start = numa_place_start_cpu(rank);
    if (start >= 0)
        set_env_int("SHMESH_START_CPU", start);
}

/* "0-3,8,10-11", cut short with "..." when it does not fit. */
static void format_cpus(const cpu_set_t *set, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, set))
            continue;
        int last = c;
        while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, set))
            last++;
        char piece[32];
        int w = last == c ? snprintf(piece, sizeof piece, "%s%d", n ? "," : "", c)
                          : snprintf(piece, sizeof piece, "%s%d-%d", n ? "," : "", c, last);
        if (n + (size_t)w + 4 > len) {
            snprintf(buf + n, len - n, "...");
            return;
        }
        memcpy(buf + n, piece, (size_t)w + 1);
        n += (size_t)w;
        c = last;
    }
}

void bind_report(const struct job *j)
{
    const struct gpu_env *g = &j->gpus;
    if (!g->count)
        return;
    for (int r = 0; r < j->o.np; r++) {
        char *ids = gpus_of_rank(g, r, j->o.devices);
        const char *first = gpus_first(g, r, j->o.devices);
        char where[256] = "", how[256] = "", why[160] = "", cpus[128];
        int i = gpus_find(g, first, why, sizeof why);
        if (i >= 0) {
            const struct gpu_info *in = &g->info[i];
            char node[32] = "unknown";
            if (in->node >= 0)
                snprintf(node, sizeof node, "%d", in->node);
            snprintf(where, sizeof where, "%s%s at %s, NUMA node %s", j->o.devices > 1 ? "; GPU " : "",
                     j->o.devices > 1 ? first : "", in->pci[0] ? in->pci : "an unknown PCI address",
                     node);
        } else {
            snprintf(where, sizeof where, "%s%s (%s)", j->o.devices > 1 ? "; GPU " : "",
                     j->o.devices > 1 ? first : "", why);
        }
        int slot_node = seg_ctrl(j->seg, r)->numa_node;
        int near = j->gpu_of ? j->gpu_of[r] : -1;
        if (j->o.bind == BIND_CORE && j->cpus) {
            snprintf(how, sizeof how, "CPU %d (--bind-to core)", j->cpus[r]);
        } else if (j->o.bind != BIND_NUMA) {
            snprintf(how, sizeof how, "not bound (--bind-to none)");
        } else if (near >= 0 && g->info[near].has_cpus && CPU_COUNT(&j->near[near]) > 0) {
            format_cpus(&j->near[near], cpus, sizeof cpus);
            snprintf(how, sizeof how, "CPUs %s", cpus);
        } else if (near >= 0 && g->info[near].has_cpus) {
            format_cpus(&g->info[near].cpus, cpus, sizeof cpus);
            snprintf(how, sizeof how, "not bound: none of its CPUs (%s) is allowed", cpus);
        } else if (slot_node >= 0) {
            snprintf(how, sizeof how, "the CPUs of NUMA node %d", slot_node);
        } else {
            snprintf(how, sizeof how, near >= 0 ? "not bound (its CPUs are not known)" : "not bound");
        }
        fprintf(stderr, PROG ": rank %d: GPU%s %s%s; %s\n", r, j->o.devices > 1 ? "s" : "",
                ids ? ids : first, where, how);
        free(ids);
    }
}
