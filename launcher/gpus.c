/* GPUs for the ranks: count the node's GPUs and hand each rank the ids of
 * its devices (one, or --devices-per-rank of them) through a single
 * visibility variable. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher.h"

/* AMD: KFD topology nodes with a non-zero gpu_id (CPU nodes have 0). */
static int count_amd(const char *sysroot)
{
    char path[512];
    snprintf(path, sizeof path, "%s/sys/class/kfd/kfd/topology/nodes", sysroot);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char idpath[1024];
        snprintf(idpath, sizeof idpath, "%s/%s/gpu_id", path, e->d_name);
        FILE *f = fopen(idpath, "r");
        if (!f)
            continue;
        unsigned long id = 0;
        if (fscanf(f, "%lu", &id) == 1 && id != 0)
            n++;
        fclose(f);
    }
    closedir(d);
    return n;
}

static int count_nvidia(const char *sysroot)
{
    char path[512];
    snprintf(path, sizeof path, "%s/proc/driver/nvidia/gpus", sysroot);
    int n = dir_entries(path);
    return n > 0 ? n : 0;
}

int dir_entries(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static char *dup_id(const char *s, size_t len)
{
    char *id = malloc(len + 1);
    if (id) {
        memcpy(id, s, len);
        id[len] = '\0';
    }
    return id;
}

void gpus_detect(struct gpu_env *g, const char *sysroot)
{
    memset(g, 0, sizeof *g);
    int amd = count_amd(sysroot), nv = amd ? 0 : count_nvidia(sysroot);
    if (!amd && !nv)
        return;
    g->var = amd ? "HIP_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES";
    /* Already restricted by the user: hand out the listed devices in order. */
    const char *given = getenv(g->var);
    int max = amd ? amd : nv;
    g->ids = calloc((size_t)max + 64, sizeof *g->ids);
    if (!g->ids)
        return;
    if (given && *given) {
        const char *s = given;
        while (*s && g->count < max + 64) {
            size_t len = strcspn(s, ",");
            if (len)
                g->ids[g->count++] = dup_id(s, len);
            s += len + (s[len] == ',');
        }
        return;
    }
    for (int i = 0; i < max; i++) {
        char buf[16];
        snprintf(buf, sizeof buf, "%d", i);
        g->ids[g->count++] = dup_id(buf, strlen(buf));
    }
}

void gpus_free(struct gpu_env *g)
{
    for (int i = 0; i < g->count; i++)
        free(g->ids[i]);
    free(g->ids);
    memset(g, 0, sizeof *g);
}

/* Local device l of the rank: round-robin when the job has more devices
 * than there are GPUs (main() has made sure k of them are distinct). */
static const char *gpu_id(const struct gpu_env *g, int rank, int k, int l)
{
    return g->ids[((size_t)rank * k + l) % (size_t)g->count];
}

char *gpus_of_rank(const struct gpu_env *g, int rank, int k)
{
    size_t len = 1;
    for (int l = 0; l < k; l++)
        len += strlen(gpu_id(g, rank, k, l)) + 1;
    char *list = malloc(len), *p = list;
    for (int l = 0; list && l < k; l++)
        p += sprintf(p, "%s%s", l ? "," : "", gpu_id(g, rank, k, l));
    return list;
}
