// test_op_table.c: the op table's check (op_table.h) on the CPU backend: its table is complete, the
// check names each missing op, and its list of ops covers every field of backend.h's Backend.
#include <string.h>

#include "check.h"
#include "backend/op_table.h"
#include "backend/cpu/cpu_backend.h"

static void **field(Backend *be, size_t offset) { return (void **)((char *)be + offset); }

static void test_cpu_table_complete(void) {
    const char *missing = backend_missing_op(backend_cpu());
    check(!missing, "cpu_table_complete", "first missing op: %s", missing ? missing : "none");
}

// Every op of the list, taken out of a copy of the CPU table: a required one is named, an optional
// one leaves the table complete.
static void test_each_missing_op_named(void) {
    int n = 0, wrong = 0;
    const char *name, *first_wrong = "none";
    size_t offset;
    int optional;
    for (int i = 0; (name = backend_op(i, &offset, &optional)); i++, n++) {
        Backend be = *backend_cpu();
        *field(&be, offset) = NULL;
        const char *said = backend_missing_op(&be);
        int ok = optional ? !said : said && !strcmp(said, name);
        if (!ok && !wrong++) first_wrong = name;
    }
    Backend be = *backend_cpu();
    be.operand_bytes = 0;
    const char *said = backend_missing_op(&be);
    check(n > 0 && !wrong && said && !strcmp(said, "operand_bytes"), "each_missing_op_named",
          "%d ops, %d not reported as they should be (first: %s); operand_bytes 0 reported as %s", n, wrong,
          first_wrong, said ? said : "nothing");
}

// The list covers backend.h: a table made of the CPU's data fields and of the listed ops alone is
// the CPU table byte for byte. An op added to Backend but not to the list (which the start-up
// check would then never look at) is a field this copy leaves NULL where the CPU sets it.
static void test_list_covers_backend(void) {
    const Backend *cpu = backend_cpu();
    Backend rebuilt;
    memset(&rebuilt, 0, sizeof rebuilt);
    rebuilt.name = cpu->name, rebuilt.precision = cpu->precision, rebuilt.operand_bytes = cpu->operand_bytes;
    const char *name;
    size_t offset;
    int optional, n = 0;
    for (int i = 0; (name = backend_op(i, &offset, &optional)); i++, n++)
        *field(&rebuilt, offset) = *field((Backend *)cpu, offset);
    size_t first = sizeof rebuilt;
    for (size_t b = 0; b < sizeof rebuilt && first == sizeof rebuilt; b++)
        if (((const char *)&rebuilt)[b] != ((const char *)cpu)[b]) first = b;
    if (first == sizeof rebuilt)
        check(1, "op_list_covers_backend", "%d ops listed; the CPU table rebuilt from them is the same %zu bytes", n,
              sizeof rebuilt);
    else
        check(0, "op_list_covers_backend", "%d ops listed; the CPU table rebuilt from them differs at byte %zu of %zu "
              "(a field of Backend the list of src/backend/op_table.c does not name)", n, first, sizeof rebuilt);
}

int main(void) {
    test_cpu_table_complete();
    test_each_missing_op_named();
    test_list_covers_backend();
    return g_failed ? 1 : 0;
}
