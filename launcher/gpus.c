/* GPUs for the ranks: find the node's GPUs and where each sits (PCI
 * address, NUMA node, nearby CPUs), and hand each rank the ids of its
 * devices (one, or --devices-per-rank of them) through a single visibility
 * variable.  Everything is read under SHMESH_SYSROOT, so that tests can
 * present fake GPUs; whatever cannot be read is simply not known. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher.h"
#include "proc.h"

/* A kernel CPU list ("0-3,8,10-11"), as in local_cpulist; false when it
 * does not parse.  CPUs beyond CPU_SETSIZE are left out. */
static bool parse_cpulist(const char *s, cpu_set_t *set)
{
    CPU_ZERO(set);
    while (*s) {
        char *end;
        errno = 0;
        unsigned long a = strtoul(s, &end, 10), b = a;
        if (errno || end == s || !isdigit((unsigned char)*s))
            return false;
        s = end;
        if (*s == '-') {
            const char *from = ++s;
            b = strtoul(from, &end, 10);
            if (errno || end == from || !isdigit((unsigned char)*from) || b < a)
                return false;
            s = end;
        }
        for (unsigned long c = a; c <= b && c < CPU_SETSIZE; c++)
            CPU_SET(c, set);
        if (*s == ',')
            s++;
        else if (*s)
            return false;
    }
    return true;
}

/* Where the PCI device `pci` sits: its NUMA node and the CPUs near it
 * (local_cpulist; failing that, the node's cpulist). */
static void read_locality(struct gpu_info *g, const char *sysroot)
{
    char path[512], line[4096];
    g->node = -1;
    if (!g->pci[0])
        return;
    snprintf(path, sizeof path, "%s/sys/bus/pci/devices/%s/numa_node", sysroot, g->pci);
    if (proc_read_line(path, line, sizeof line)) {
        char *end;
        long node = strtol(line, &end, 10);
        if (end != line && !*end && node >= 0 && node < 1 << 16)
            g->node = (int)node; /* -1 on machines without NUMA */
    }
    snprintf(path, sizeof path, "%s/sys/bus/pci/devices/%s/local_cpulist", sysroot, g->pci);
    bool listed = proc_read_line(path, line, sizeof line);
    if (!listed && g->node >= 0) {
        snprintf(path, sizeof path, "%s/sys/devices/system/node/node%d/cpulist", sysroot, g->node);
        listed = proc_read_line(path, line, sizeof line);
    }
    g->has_cpus = listed && parse_cpulist(line, &g->cpus) && CPU_COUNT(&g->cpus) > 0;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* AMD: KFD topology nodes with a non-zero gpu_id (CPU nodes have 0),
 * numbered in node order as the HIP runtime numbers them.  Returns how
 * many; fills `out` (up to max) when given. */
static int find_amd(const char *sysroot, struct gpu_info *out, int max)
{
    char path[512];
    snprintf(path, sizeof path, "%s/sys/class/kfd/kfd/topology/nodes", sysroot);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int *nodes = NULL, count = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long v = strtol(e->d_name, &end, 10);
        if (!isdigit((unsigned char)e->d_name[0]) || *end || v > 1 << 20)
            continue;
        if (count == cap) {
            int *more = realloc(nodes, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *nodes);
            if (!more)
                break;
            nodes = more;
        }
        nodes[count++] = (int)v;
    }
    closedir(d);
    qsort(nodes, (size_t)count, sizeof *nodes, cmp_int);
    int n = 0;
    for (int i = 0; i < count; i++) {
        char file[1024], line[256];
        snprintf(file, sizeof file, "%s/%d/gpu_id", path, nodes[i]);
        if (!proc_read_line(file, line, sizeof line) || strtoul(line, NULL, 10) == 0)
            continue;
        if (out && n < max) {
            struct gpu_info *g = &out[n];
            memset(g, 0, sizeof *g);
            /* properties: "name value" lines; the PCI address is packed
             * into location_id (bus << 8 | device << 3 | function). */
            snprintf(file, sizeof file, "%s/%d/properties", path, nodes[i]);
            FILE *f = fopen(file, "re");
            uint64_t loc = 0, domain = 0, unique = 0;
            bool has_loc = false;
            while (f && fgets(line, sizeof line, f)) {
                char key[64];
                uint64_t v;
                if (sscanf(line, "%63s %" SCNu64, key, &v) != 2)
                    continue;
                if (!strcmp(key, "location_id"))
                    loc = v, has_loc = true;
                else if (!strcmp(key, "domain"))
                    domain = v;
                else if (!strcmp(key, "unique_id"))
                    unique = v;
            }
            if (f)
                fclose(f);
            if (has_loc)
                snprintf(g->pci, sizeof g->pci, "%04x:%02x:%02x.%x", (unsigned)(domain & 0xffff),
                         (unsigned)((loc >> 8) & 0xff), (unsigned)((loc >> 3) & 0x1f),
                         (unsigned)(loc & 7));
            if (unique) /* the UUID ROCm shows: GPU- and unique_id in hex */
                snprintf(g->uuid, sizeof g->uuid, "GPU-%016" PRIx64, unique);
        }
        n++;
    }
    free(nodes);
    return n;
}

/* "0000:17:00.0" as numbers, for PCI order; false for another name. */
static bool pci_key(const char *s, unsigned k[4])
{
    int used = 0;
    return sscanf(s, "%x:%x:%x.%x%n", &k[0], &k[1], &k[2], &k[3], &used) == 4 && !s[used];
}

static int cmp_pci(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    unsigned kx[4], ky[4];
    bool px = pci_key(x, kx), py = pci_key(y, ky);
    if (px != py)
        return px ? -1 : 1;
    if (px)
        for (int i = 0; i < 4; i++)
            if (kx[i] != ky[i])
                return kx[i] < ky[i] ? -1 : 1;
    return strcmp(x, y);
}

/* NVIDIA: the entries of /proc/driver/nvidia/gpus are the GPUs' PCI
 * addresses; GPU i is the i-th in PCI order (CUDA_DEVICE_ORDER=PCI_BUS_ID,
 * as nvidia-smi numbers them).  Returns how many; fills `out` when given. */
static int find_nvidia(const char *sysroot, struct gpu_info *out, int max)
{
    char path[512];
    snprintf(path, sizeof path, "%s/proc/driver/nvidia/gpus", sysroot);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    char **names = NULL;
    int count = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (count == cap) {
            char **more = realloc(names, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *names);
            if (!more)
                break;
            names = more;
        }
        if (!(names[count] = strdup(e->d_name)))
            break;
        count++;
    }
    closedir(d);
    qsort(names, (size_t)count, sizeof *names, cmp_pci);
    for (int i = 0; i < count; i++) {
        if (out && i < max) {
            struct gpu_info *g = &out[i];
            memset(g, 0, sizeof *g);
            unsigned k[4];
            if (pci_key(names[i], k))
                snprintf(g->pci, sizeof g->pci, "%s", names[i]);
            char file[1024], line[256];
            snprintf(file, sizeof file, "%s/%s/information", path, names[i]);
            FILE *f = fopen(file, "re");
            while (f && fgets(line, sizeof line, f)) {
                if (strncmp(line, "GPU UUID:", 9))
                    continue;
                const char *v = line + 9;
                v += strspn(v, " \t");
                snprintf(g->uuid, sizeof g->uuid, "%.*s", (int)strcspn(v, " \t\n"), v);
            }
            if (f)
                fclose(f);
        }
        free(names[i]);
    }
    free(names);
    return count;
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

/* A decimal id without its leading zeros ("007" is GPU 7), so that a rank
 * given "0,00" is seen to hold GPU 0 twice; NULL for anything else. */
static char *integer_id(const char *s, size_t len)
{
    if (!len || len > 32)
        return NULL;
    for (size_t i = 0; i < len; i++)
        if (!isdigit((unsigned char)s[i]))
            return NULL;
    while (len > 1 && *s == '0')
        s++, len--;
    return len > 9 ? NULL : dup_id(s, len); /* at most 999999999 */
}

/* GPU-8932f937-d72c-... (NVIDIA, and ROCm's GPU-<unique_id in hex>) or
 * MIG-...: a prefix, then hex digits and dashes. */
static bool uuid_like(const char *s, size_t len)
{
    if (len <= 4 || (strncmp(s, "GPU-", 4) && strncmp(s, "MIG-", 4)))
        return false;
    bool digit = false;
    for (size_t i = 4; i < len; i++) {
        if (isxdigit((unsigned char)s[i]))
            digit = true;
        else if (s[i] != '-')
            return false;
    }
    return digit;
}

int gpus_parse_list(const char *list, char ***ids_out, int *count_out, char *why, size_t len)
{
    size_t max = 1;
    for (const char *p = list; *p; p++)
        max += *p == ',';
    char **ids = calloc(max, sizeof *ids);
    if (!ids) {
        snprintf(why, len, "out of memory");
        return -1;
    }
    int n = 0;
    const char *s = list;
    for (;;) {
        size_t l = strcspn(s, ",");
        char *id = integer_id(s, l);
        if (!id && uuid_like(s, l))
            id = dup_id(s, l);
        if (!id) {
            if (l)
                snprintf(why, len, "entry %d, '%.*s', is not a GPU id", n + 1, (int)(l > 64 ? 64 : l),
                         s);
            else
                snprintf(why, len, "entry %d is empty", n + 1);
            for (int i = 0; i < n; i++)
                free(ids[i]);
            free(ids);
            return -1;
        }
        ids[n++] = id;
        if (!s[l])
            break;
        s += l + 1;
    }
    *ids_out = ids;
    *count_out = n;
    return 0;
}

bool gpus_same(const char *a, const char *b) { return !strcasecmp(a, b); }

bool gpus_mps_running(const char *sysroot)
{
    const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    char path[4200];
    if (dir && *dir)
        snprintf(path, sizeof path, "%s/control", dir);
    else
        snprintf(path, sizeof path, "%s/tmp/nvidia-mps/control", sysroot);
    return access(path, F_OK) == 0;
}

static void set_numbering(struct gpu_env *g)
{
    g->pci_order = true;
    if (strcmp(g->var, "CUDA_VISIBLE_DEVICES"))
        return; /* HIP numbers the KFD nodes in order */
    /* CUDA's own default order (fastest first) may differ from PCI order:
     * the ranks get PCI_BUS_ID, so that an id means the GPU the launcher
     * found at that place, unless the user chose an order. */
    const char *order = getenv("CUDA_DEVICE_ORDER");
    g->set_order = !order || !*order;
    g->pci_order = g->set_order || !strcmp(order, "PCI_BUS_ID");
}

int gpus_detect(struct gpu_env *g, const char *sysroot, enum gpu_mode mode, char **list,
                int listed)
{
    memset(g, 0, sizeof *g);
    if (mode == GPUS_NONE)
        return 0;
    int amd = find_amd(sysroot, NULL, 0), nv = amd ? 0 : find_nvidia(sysroot, NULL, 0);
    int found = amd ? amd : nv;
    if (found) {
        g->info = calloc((size_t)found, sizeof *g->info);
        if (g->info)
            g->found = amd ? find_amd(sysroot, g->info, found) : find_nvidia(sysroot, g->info, found);
        if (g->found > found) /* a GPU appeared between the two looks */
            g->found = found;
        for (int i = 0; i < g->found; i++)
            read_locality(&g->info[i], sysroot);
    }
    if (mode == GPUS_LIST) {
        /* Nothing found (no driver visible here): the variable of the
         * runtime whose driver is present, else CUDA's. */
        char kfd[512];
        struct stat st;
        snprintf(kfd, sizeof kfd, "%s/sys/class/kfd/kfd/topology", sysroot);
        g->var = amd || (!nv && stat(kfd, &st) == 0) ? "HIP_VISIBLE_DEVICES"
                                                     : "CUDA_VISIBLE_DEVICES";
        g->listed = true;
        set_numbering(g);
        g->ids = calloc((size_t)listed, sizeof *g->ids);
        for (int i = 0; g->ids && i < listed; i++)
            if ((g->ids[i] = strdup(list[i])))
                g->count++;
        return g->count == listed ? 0 : -1;
    }
    if (!found)
        return 0;
    g->var = amd ? "HIP_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES";
    set_numbering(g);
    /* Already restricted by the user: hand out the listed devices in order. */
    const char *given = getenv(g->var);
    g->ids = calloc((size_t)found + 64, sizeof *g->ids);
    if (!g->ids)
        return -1;
    if (given && *given) {
        const char *s = given;
        while (*s && g->count < found + 64) {
            size_t len = strcspn(s, ",");
            if (len && !(g->ids[g->count++] = dup_id(s, len)))
                return -1;
            s += len + (s[len] == ',');
        }
        return 0;
    }
    for (int i = 0; i < found; i++) {
        char buf[16];
        snprintf(buf, sizeof buf, "%d", i);
        if (!(g->ids[g->count++] = dup_id(buf, strlen(buf))))
            return -1;
    }
    return 0;
}

void gpus_free(struct gpu_env *g)
{
    for (int i = 0; i < g->count; i++)
        free(g->ids[i]);
    free(g->ids);
    free(g->info);
    memset(g, 0, sizeof *g);
}

int gpus_find(const struct gpu_env *g, const char *id, char *why, size_t len)
{
    if (isdigit((unsigned char)id[0])) {
        char *end;
        long i = strtol(id, &end, 10);
        if (*end)
            snprintf(why, len, "not a GPU id the launcher knows");
        else if (!g->pci_order)
            snprintf(why, len, "CUDA_DEVICE_ORDER=%s numbers the GPUs in an order the launcher "
                     "does not know", getenv("CUDA_DEVICE_ORDER"));
        else if (!g->found)
            snprintf(why, len, "no GPU was found to place it");
        else if (i >= g->found)
            snprintf(why, len, "not among the %d GPU%s found", g->found, g->found == 1 ? "" : "s");
        else
            return (int)i;
        return -1;
    }
    for (int i = 0; i < g->found; i++)
        if (g->info[i].uuid[0] && gpus_same(g->info[i].uuid, id))
            return i;
    snprintf(why, len, "no GPU found has that UUID");
    return -1;
}

/* Local device l of the rank: round-robin when the job has more devices
 * than there are GPUs (main() has made sure k of them are distinct). */
static const char *gpu_id(const struct gpu_env *g, int rank, int k, int l)
{
    return g->ids[((size_t)rank * k + l) % (size_t)g->count];
}

const char *gpus_first(const struct gpu_env *g, int rank, int k) { return gpu_id(g, rank, k, 0); }

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
