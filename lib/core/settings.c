/* Parsing the settings table (settings.h).  Built into its own static
 * library, which libshmesh, shmesh-run and shmesh-bench link: the one place
 * that calls getenv on a SHMESH_* name. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmesh.h"

#include "core/hash.h"
#include "core/settings.h"
#include "shm/errtext.h"
#include "shm/layout.h"
#include "shm/segment.h"

enum type { T_TEXT, T_WORLD, T_DEVICES, T_RANK, T_INDEX, T_NOTIFY, T_NET, T_SECONDS, T_SIZE,
            T_BYTES, T_PAGES, T_NS, T_SWITCH, T_DEBUG };

const struct setting_info settings_table[SETTING_COUNT] = {
#define SETTINGS_INFO(NAME, field, type, dflt, doc, who, hashed, meaning)                       \
    [SETTING_##NAME] = {"SHMESH_" #NAME, #type, doc, who, hashed, meaning},
    SHMESH_SETTINGS(SETTINGS_INFO)
#undef SETTINGS_INFO
};

static const struct {
    enum type type;
    size_t offset, size;
} members[SETTING_COUNT] = {
#define SETTINGS_MEMBER(NAME, field, type, ...)                                                 \
    [SETTING_##NAME] = {T_##type, offsetof(struct settings, field),                            \
                        sizeof(((struct settings *)0)->field)},
    SHMESH_SETTINGS(SETTINGS_MEMBER)
#undef SETTINGS_MEMBER
};

/* A hashed row is a number (settings_hashed_values). */
#define SETTINGS_HASHED_NUMBER(NAME, field, type, dflt, doc, who, hashed, meaning)              \
    _Static_assert(!(hashed) || T_##type != T_TEXT, "SHMESH_" #NAME " is hashed: not a TEXT");
SHMESH_SETTINGS(SETTINGS_HASHED_NUMBER)
#undef SETTINGS_HASHED_NUMBER

static const struct {
    const char *word;
    unsigned bits;
} debug_words[] = {
    {"paths", SETTINGS_DEBUG_PATHS},
    {"waits", SETTINGS_DEBUG_WAITS},
    {"calls", SETTINGS_DEBUG_CALLS},
    {"all", SETTINGS_DEBUG_ALL},
};

void settings_defaults(struct settings *s)
{
#define SETTINGS_DEFAULT(NAME, field, type, dflt, ...) s->field = dflt;
    SHMESH_SETTINGS(SETTINGS_DEFAULT)
#undef SETTINGS_DEFAULT
}

static bool parse_long(const char *v, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < min || x > max)
        return false;
    *out = x;
    return true;
}

static bool word_is(const char *w, size_t len, const char *word)
{
    return strlen(word) == len && !strncmp(w, word, len);
}

/* A bitmask from "paths,calls"; spaces around words and empty words are
 * allowed. */
static int parse_debug(const char *name, const char *v, unsigned *out, char *err, size_t errlen)
{
    const size_t nwords = sizeof debug_words / sizeof *debug_words;
    unsigned bits = 0;
    for (const char *w = v; *w;) {
        size_t len = strcspn(w, ",");
        const char *next = w + len + (w[len] == ',');
        for (; len && *w == ' '; len--)
            w++;
        for (; len && w[len - 1] == ' '; len--)
            ;
        size_t i = 0;
        while (i < nwords && !word_is(w, len, debug_words[i].word))
            i++;
        if (i < nwords)
            bits |= debug_words[i].bits;
        else if (len)
            return errtext_set(err, errlen, SHMESH_ERR_INVALID,
                               "%s must be a comma-separated list of paths, waits, calls or all, "
                               "found '%.*s' in '%s'",
                               name, (int)len, w, v);
        w = next;
    }
    *out = bits;
    return 0;
}

int settings_parse(struct settings *s, enum setting id, const char *v, char *err, size_t errlen)
{
    if ((unsigned)id >= SETTING_COUNT)
        return errtext_set(err, errlen, SHMESH_ERR_INVALID, "unknown setting %d", (int)id);
    const char *name = settings_table[id].name;
    void *member = (char *)s + members[id].offset;
    if (!v || !*v) {
        struct settings d;
        settings_defaults(&d);
        memcpy(member, (const char *)&d + members[id].offset, members[id].size);
        return 0;
    }
    long l;
    switch (members[id].type) {
    case T_TEXT:
        *(const char **)member = v;
        return 0;
    case T_WORLD:
    case T_DEVICES: {
        int max = members[id].type == T_WORLD ? SEG_MAX_WORLD : SETTINGS_MAX_LOCAL_DEVICES;
        if (!parse_long(v, 1, max, &l))
            return errtext_set(err, errlen, SHMESH_ERR_INVALID,
                               "%s must be an integer in [1, %d], found '%s'", name, max, v);
        *(int *)member = (int)l;
        return 0;
    }
    case T_RANK:
        if (!parse_long(v, 0, s->world - 1, &l))
            return errtext_set(err, errlen, SHMESH_ERR_INVALID,
                               "%s must be an integer in [0, %d], found '%s'", name, s->world - 1,
                               v);
        *(int *)member = (int)l;
        return 0;
    case T_INDEX:
    case T_NS:
        if (!parse_long(v, 0, INT_MAX, &l))
            return errtext_set(err, errlen, SHMESH_ERR_INVALID,
                               "%s must be an integer in [0, %d], found '%s'", name, INT_MAX, v);
        if (members[id].type == T_NS)
            *(int64_t *)member = l;
        else
            *(int *)member = (int)l;
        return 0;
    case T_NOTIFY:
        if (notify_parse_kind(v, (enum notify_kind *)member) < 0)
            return errtext_set(err, errlen, SHMESH_ERR_INVALID,
                               "%s must be uring, futex or auto, found '%s'", name, v);
        return 0;
    case T_NET: {
        static const char *const words[] = {[SETTINGS_NET_AUTO] = "auto",
                                            [SETTINGS_NET_MPI] = "mpi",
                                            [SETTINGS_NET_NONE] = "none"};
        for (int i = 0; i < (int)(sizeof words / sizeof *words); i++)
            if (!strcmp(v, words[i])) {
                *(enum settings_net *)member = (enum settings_net)i;
                return 0;
            }
        return errtext_set(err, errlen, SHMESH_ERR_INVALID,
                           "%s must be auto, mpi or none, found '%s'", name, v);
    }
    case T_SECONDS: {
        char *end;
        errno = 0;
        double secs = strtod(v, &end);
        /* An underflow (1e-400) is a positive number too small to hold. */
        bool tiny = errno == ERANGE && secs > -1 && secs < 1;
        if (tiny)
            errno = 0;
        if (errno || *end || end == v || !(secs >= 0) || secs > 1e9 ||
            v[strspn(v, " \t")] == '-')
            return errtext_set(err, errlen, SHMESH_ERR_INVALID,
                               "%s must be a number of seconds >= 0, found '%s'", name, v);
        int64_t ns = (int64_t)(secs * 1e9);
        /* 0 means "no limit": a limit too small to count in nanoseconds is 1 ns. */
        if (tiny || secs > 0)
            ns = ns < 1 ? 1 : ns;
        *(int64_t *)member = ns;
        return 0;
    }
    case T_SIZE: {
        uint64_t size = seg_parse_size(v);
        if (!size)
            return errtext_set(err, errlen, SHMESH_ERR_INVALID,
                               "%s must be a size such as 64M or 1G, found '%s'", name, v);
        *(uint64_t *)member = size;
        return 0;
    }
    case T_BYTES: {
        uint64_t size = strcmp(v, "0") ? seg_parse_size(v) : 0;
        if (!size && strcmp(v, "0"))
            return errtext_set(err, errlen, SHMESH_ERR_INVALID,
                               "%s must be a size in bytes such as 0, 4096 or 1M, found '%s'", name,
                               v);
        *(uint64_t *)member = size;
        return 0;
    }
    case T_PAGES: {
        char *end;
        errno = 0;
        /* strtoull takes "-4096" as 2^64 - 4096: digits only. */
        unsigned long long x = *v >= '0' && *v <= '9' ? strtoull(v, &end, 10) : 0;
        if (errno || x == 0 || *end || x % SEG_PAGE)
            return errtext_set(err, errlen, SHMESH_ERR_INVALID,
                               "%s must be a positive multiple of %u, found '%s'", name, SEG_PAGE,
                               v);
        *(uint64_t *)member = x;
        return 0;
    }
    case T_SWITCH:
        *(bool *)member = strcmp(v, "0") != 0;
        return 0;
    case T_DEBUG:
        return parse_debug(name, v, (unsigned *)member, err, errlen);
    }
    return errtext_set(err, errlen, SHMESH_ERR_INVALID, "%s: no parser for its type", name);
}

int settings_read(struct settings *s, enum setting id, char *err, size_t errlen)
{
    if ((unsigned)id >= SETTING_COUNT)
        return errtext_set(err, errlen, SHMESH_ERR_INVALID, "unknown setting %d", (int)id);
    return settings_parse(s, id, getenv(settings_table[id].name), err, errlen);
}

int settings_read_library(struct settings *s, char *err, size_t errlen)
{
    settings_defaults(s);
    settings_read(s, SETTING_SEGMENT, NULL, 0);
    if (s->segment) {
        /* Both must be there: a segment alone is a half-set environment. */
        static const enum setting needed[] = {SETTING_WORLD_SIZE, SETTING_RANK};
        for (size_t i = 0; i < sizeof needed / sizeof *needed; i++) {
            const char *name = settings_table[needed[i]].name, *v = getenv(name);
            if (!v || !*v)
                return errtext_set(err, errlen, SHMESH_ERR_INVALID,
                                   "SHMESH_SEGMENT is set but %s is not: start the program with "
                                   "shmesh-run, or unset SHMESH_SEGMENT to run as a single rank",
                                   name);
            if (settings_parse(s, needed[i], v, err, errlen)) {
                /* The rank is not known yet; say it when the rank's text is one. */
                const char *rank = getenv(settings_table[SETTING_RANK].name);
                if (needed[i] != SETTING_RANK && rank && rank[0] &&
                    strspn(rank, "0123456789") == strlen(rank)) {
                    char why[256];
                    snprintf(why, sizeof why, "%s", err ? err : "");
                    return errtext_set(err, errlen, SHMESH_ERR_INVALID, "rank %s: %s", rank, why);
                }
                return SHMESH_ERR_INVALID;
            }
        }
    }
    /* The rest in table order; from here on the rank is known. */
    for (int id = 0; id < SETTING_COUNT; id++) {
        if (!(settings_table[id].who & SETTINGS_LIBRARY) || id == SETTING_SEGMENT ||
            id == SETTING_WORLD_SIZE || id == SETTING_RANK)
            continue; /* not the library's, or read above */
        if (id == SETTING_SHM_SIZE && s->segment)
            continue; /* the launcher sized the job's segment */
        char why[256];
        if (settings_read(s, (enum setting)id, why, sizeof why))
            return errtext_set(err, errlen, SHMESH_ERR_INVALID, "rank %d: %s", s->rank, why);
    }
    return 0;
}

/* Setting id's member as a number: unsigned types as they are, signed ones
 * sign-extended (as two's complement). */
static uint64_t number(const struct settings *s, int id)
{
    const char *m = (const char *)s + members[id].offset;
    switch (members[id].size) {
    case 1: {
        bool b;
        memcpy(&b, m, 1);
        return b;
    }
    case 4: {
        int32_t x;
        memcpy(&x, m, 4);
        return members[id].type == T_DEBUG ? (uint32_t)x : (uint64_t)(int64_t)x;
    }
    default: {
        uint64_t x;
        memcpy(&x, m, 8);
        return x;
    }
    }
}

void settings_hashed_values(const struct settings *s, uint64_t *v)
{
    int n = 0;
    for (int id = 0; id < SETTING_COUNT; id++)
        if (settings_table[id].hashed)
            v[n++] = number(s, id);
}

uint64_t settings_hashed_hash(const uint64_t *v)
{
    return hash_bytes(v, sizeof *v * SETTINGS_HASHED, 2);
}

/* A value as its type reads: sizes unsigned, the rest signed. */
static void put_value(char *buf, size_t len, int id, uint64_t v)
{
    enum type t = members[id].type;
    if (t == T_SIZE || t == T_BYTES || t == T_PAGES || t == T_DEBUG || t == T_SWITCH)
        snprintf(buf, len, "%" PRIu64, v);
    else
        snprintf(buf, len, "%" PRId64, (int64_t)v);
}

int settings_hashed_text(char *buf, size_t len, const uint64_t *mine, int me,
                         const uint64_t *theirs, int other)
{
    if (!len)
        return 0;
    buf[0] = '\0';
    size_t at = 0;
    int differ = 0, i = 0;
    for (int id = 0; id < SETTING_COUNT && theirs; id++) {
        if (!settings_table[id].hashed)
            continue;
        if (mine[i] != theirs[i]) {
            char a[24], b[24];
            put_value(a, sizeof a, id, mine[i]);
            put_value(b, sizeof b, id, theirs[i]);
            int n = snprintf(buf + at, len - at, "%s%s is %s on rank %d but %s on rank %d",
                             differ ? "; " : "", settings_table[id].name, a, me, b, other);
            at = n < 0 || (size_t)n >= len - at ? len - 1 : at + (size_t)n;
            differ++;
        }
        i++;
    }
    if (differ)
        return differ;
    for (int id = 0, k = 0; id < SETTING_COUNT; id++) {
        if (!settings_table[id].hashed)
            continue;
        k++;
        const char *sep = k == 1 ? "" : k == SETTINGS_HASHED ? " and " : ", ";
        int n = snprintf(buf + at, len - at, "%s%s", sep, settings_table[id].name);
        at = n < 0 || (size_t)n >= len - at ? len - 1 : at + (size_t)n;
    }
    snprintf(buf + at, len - at, " must be the same on every rank");
    return 0;
}
