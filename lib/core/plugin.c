/* Loading the plugins (see plugin.h). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/plugin.h"

/* An object of libshmesh itself, whose file dladdr names. */
static const char here = 0;

void plugin_library_dir(char *dir, size_t len)
{
    Dl_info info;
    dir[0] = 0;
    if (!dladdr(&here, &info) || !info.dli_fname)
        return;
    const char *slash = strrchr(info.dli_fname, '/');
    if (slash && (size_t)(slash - info.dli_fname) < len)
        snprintf(dir, len, "%.*s", (int)(slash - info.dli_fname), info.dli_fname);
}

void *plugin_open(const char *path, const char *entry, const char *kind, void **dl, char *why,
                  size_t len)
{
    *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!*dl) {
        snprintf(why, len, "%.500s", dlerror());
        return NULL;
    }
    void *sym = dlsym(*dl, entry);
    if (!sym) {
        snprintf(why, len, "%.300s: not a shmesh %s plugin (no %s)", path, kind, entry);
        dlclose(*dl);
        *dl = NULL;
    }
    return sym;
}

void *plugin_open_beside(const char *subdir, const char *file, const char *entry,
                         const char *kind, void **dl, char *path, char *why, size_t len)
{
    const char *const subdirs[] = {"shmesh", subdir};
    char dir[4096];
    plugin_library_dir(dir, sizeof dir);
    why[0] = 0;
    for (size_t i = 0; i < sizeof subdirs / sizeof *subdirs && dir[0]; i++) {
        snprintf(path, PLUGIN_PATH_MAX, "%s/%s/%s", dir, subdirs[i], file);
        void *sym = plugin_open(path, entry, kind, dl, why, len);
        if (sym)
            return sym;
        if (access(path, F_OK) == 0) /* there, but it would not open: why says why */
            return NULL;
        why[0] = 0;
    }
    return NULL;
}
