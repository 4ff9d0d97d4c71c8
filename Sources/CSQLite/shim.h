// SQLite imports into Swift as it is; SQLITE_TRANSIENT (a macro) is rebuilt in Swift.
#ifndef THUMBD_CSQLITE_SHIM_H
#define THUMBD_CSQLITE_SHIM_H
#include <sqlite3.h>
#endif
