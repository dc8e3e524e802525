/* The path table (engine/path.h): every path, in the order the engine tries
 * them.  A new path is one line here (and its file, with its header). */
#include <stddef.h>

#include "engine/path.h"
#include "paths/device_ipc.h"
#include "paths/device_staged.h"
#include "paths/net.h"
#include "paths/rsag.h"
#include "paths/single_copy.h"
#include "paths/staged.h"
#include "paths/zero_copy.h"

const struct path *const path_table[] = {
    &path_device_ipc,
    &path_device_staged,
    &path_net,
    &path_zero_copy,
    &path_single_copy,
    &path_rsag,
    &path_staged,
};
const size_t path_count = sizeof path_table / sizeof *path_table;
/* The last entry takes every host call: choose() falls back on it (and
 * device-staged takes every device call). */
const struct path *const path_last = &path_staged;
