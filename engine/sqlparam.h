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

/*
 * The statements of a database with parts (docs/architecture.md, "On
 * Citus") filter each table by the part's key: written with SQLPARAM_IN_PART
 * (table alias) before a table's conditions, each is "alias.part = PART AND "
 * with part, nothing without (one server: the statement as it always was).
 * Appends sql so resolved to out.
 */
#define SQLPARAM_IN_PART(alias) "@in_part." alias "@"
void sqlparam_in_part(const char *sql, const char *part, buf *out);
#endif
