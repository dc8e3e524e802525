/* Where libshmesh's plugins are (the device runtimes, device/; the network,
 * net/): beside the library itself, in one of its subfolders. */
#ifndef SHMESH_CORE_PLUGIN_H
#define SHMESH_CORE_PLUGIN_H

#include <stddef.h>

/* The folder of the libshmesh this code is in ("" when unknown). */
void plugin_library_dir(char *dir, size_t len);

#endif
