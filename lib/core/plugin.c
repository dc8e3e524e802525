/* Where the plugins are (see plugin.h). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

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
