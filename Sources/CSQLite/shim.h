#include <sqlite3.h>

/// `sqlite3_config(SQLITE_CONFIG_MEMSTATUS, enabled)`: `sqlite3_config` is variadic, which Swift
/// cannot call, so the one setting Canopy changes gets a fixed-argument wrapper here.
static inline int canopy_sqlite3_config_memstatus(int enabled) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, enabled);
}
