/* pyglue.c - liboracle for the Python tests (python/tests/oracle.py loads it with ctypes):
 * the same oracle and rule as the C suites, behind a handful of exported functions. The
 * library is built with hidden visibility, so these are the module's only entry points.
 * Python mirrors or_problem, or_seq_data and or_result; or_py_sizes lets it check that
 * its mirrors have the C layout before it uses them. */
#include <stdlib.h>

#include "oracle.h"

#define OR_PY_API __attribute__((visibility("default")))

OR_PY_API void or_py_sizes(size_t s[3]);
OR_PY_API or_oracle *or_py_compute(const or_problem *p, int backward);
OR_PY_API void or_py_free(or_oracle *o);
OR_PY_API int64_t or_py_count(const or_oracle *o, int t);
OR_PY_API int or_py_check(const or_oracle *o, int t, const double *ours, or_result *r);
OR_PY_API void or_py_result_str(const or_result *r, int t, char *buf, size_t len);

/* sizeof or_problem, or_seq_data, or_result: the Python mirrors must match. */
OR_PY_API void or_py_sizes(size_t s[3])
{
    s[0] = sizeof(or_problem);
    s[1] = sizeof(or_seq_data);
    s[2] = sizeof(or_result);
}

/* The oracle of p (or_compute), on the heap; NULL when out of memory. */
OR_PY_API or_oracle *or_py_compute(const or_problem *p, int backward)
{
    or_oracle *o = malloc(sizeof *o);
    if (o && or_compute(p, backward, o)) { free(o); o = NULL; }
    return o;
}

OR_PY_API void or_py_free(or_oracle *o)
{
    if (o) or_free(o);
    free(o);
}

OR_PY_API int64_t or_py_count(const or_oracle *o, int t) { return or_count(o, (or_tensor)t); }

OR_PY_API int or_py_check(const or_oracle *o, int t, const double *ours, or_result *r)
{
    return or_check(o, (or_tensor)t, ours, r);
}

OR_PY_API void or_py_result_str(const or_result *r, int t, char *buf, size_t len)
{
    or_result_str(r, (or_tensor)t, buf, len);
}
