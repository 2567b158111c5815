// test_dist_origin.c: who says a message under mpirun (dist.h's dist_format_origin): a rank's lines
// name the rank, and its machine where the run spans several; a machine's lines name the machine only
// then; one rank, or one machine's lines on one machine, say nothing more than without MPI.
#include <string.h>

#include "check.h"
#include "dist/dist.h"

static void expect_origin(const char *name, int rank, int ranks, const char *host, int hosts, const char *want) {
    char got[128];
    dist_format_origin(got, sizeof got, rank, ranks, host, hosts);
    check(!strcmp(got, want), name, "rank %d of %d on %s, %d machine(s): '%s' (expected '%s')", rank, ranks, host, hosts,
          got, want);
}

int main(void) {
    expect_origin("one_rank_says_nothing_more", 0, 1, "node1", 1, "");
    expect_origin("rank_on_one_machine", 1, 2, "node1", 1, "rank 1: ");
    expect_origin("rank_on_several_machines", 3, 4, "node2", 2, "rank 3 (node2): ");
    expect_origin("machine_alone_says_nothing_more", -1, 2, "node1", 1, "");
    expect_origin("machine_among_several", -1, 4, "node2", 2, "node2: ");
    // cut to the buffer, never past it
    char small[8];
    memset(small, 'x', sizeof small);
    dist_format_origin(small, 6, 12, 16, "node-with-a-long-name", 2);
    check(!strcmp(small, "rank ") && small[6] == 'x', "origin_cut_to_buffer", "'%.6s'", small);
    // outside a launcher: this process is one rank, on one machine
    check(!strcmp(dist_rank_origin(), "") && !strcmp(dist_machine_origin(), ""), "origin_outside_launcher",
          "'%s', '%s'", dist_rank_origin(), dist_machine_origin());
    return g_failed ? 1 : 0;
}
