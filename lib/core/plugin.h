/* Loading libshmesh's plugins (the device runtimes, device/; the network,
 * net/): opened by path, or found beside the library itself, and their
 * entry point looked up.  Each layer checks its own table's ABI. */
#ifndef SHMESH_CORE_PLUGIN_H
#define SHMESH_CORE_PLUGIN_H

#include <stddef.h>

/* The folder of the libshmesh this code is in ("" when unknown). */
void plugin_library_dir(char *dir, size_t len);
/* Opens the plugin at `path` (RTLD_LOCAL) and finds its entry point
 * `entry`: its address, *dl the open handle; NULL with why (nothing left
 * open): the loader's sentence, or "PATH: not a shmesh KIND plugin (no
 * ENTRY)". */
void *plugin_open(const char *path, const char *entry, const char *kind, void **dl, char *why,
                  size_t len);
/* plugin_open of `file` beside libshmesh: in its folder shmesh/ (where it
 * is installed), else `subdir` (where the build tree has it); `path` (of
 * PLUGIN_PATH_MAX) receives the one opened.  NULL with why empty where
 * neither holds such a file, else why the one there would not open. */
#define PLUGIN_PATH_MAX 4400
void *plugin_open_beside(const char *subdir, const char *file, const char *entry,
                         const char *kind, void **dl, char *path, char *why, size_t len);

#endif
