/*
 * sqlparam.h - named parameters for long statements: SQL written with
 * :name placeholders is rewritten once into $1..$n, in the order of a list
 * of names (an X-macro list in the module that owns the statement), so a
 * statement with dozens of parameters is filled by name, never by a bare
 * index. A name may appear more than once; `::` casts and quoted text are
 * left alone. Pure: no I/O.
 */
#ifndef CAIRN_SQLPARAM_H
#define CAIRN_SQLPARAM_H
#include "buf.h"

/*
 * Writes sql with every :name replaced by $k, where names[k-1] is name.
 * 0, or -CAIRN_EINVAL with the unknown or unused name in err, or
 * -CAIRN_ENOMEM.
 */
int sqlparam_bind(const char *sql, const char *const *names, int n, buf *out, buf *err);
#endif
