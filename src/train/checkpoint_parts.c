// checkpoint_parts.c: the checkpoints of a run whose ranks each keep a part of the EMA and the
// optimizer state (ZeRO-1, optim.h). Rank 0 writes the one file, of the layout a one-rank run
// writes; the other ranks' parts reach its staging buffer here, over MPI (dist.h).
#include <string.h>

#include "train/checkpoint_internal.h"
#include "dist/dist.h"

// One part on the wire: the table entry it belongs to and where its bytes go in the tensor's.
typedef struct {
    uint64_t entry, offset, bytes;
} WirePart;

// The entries whose bytes are split over the ranks: the EMA's and the optimizer state's.
static int is_split(const CkptTensor *t) { return !strncmp(t->name, "ema.", 4) || !strncmp(t->name, "optim.", 6); }

size_t ckpt_parts_bytes(const CkptTable *tab) {
    size_t n = 0;
    for (int i = 0; i < tab->n; i++)
        if (tab->t[i].device && is_split(&tab->t[i])) n += tab->t[i].part_bytes;
    return n;
}

struct CkptPartSender {
    const Backend *be;
    int32_t block_size;
    CkptTable tab;
    uint8_t *scratch;  // (ckpt_parts_bytes) host
};

CkptPartSender *ckpt_part_sender_start(const Model *m, const real *ema, const Optimizer *o) {
    CkptPartSender *s = fc_calloc(1, sizeof *s);
    s->be = m->be, s->block_size = ADAM8_BLOCK;
    s->tab = ckpt_build_table(m, ema, o, &s->block_size);
    s->scratch = fc_malloc(ckpt_parts_bytes(&s->tab) + 1);
    return s;
}

void ckpt_part_sender_send(CkptPartSender *s) { ckpt_send_parts(s->be, &s->tab, s->scratch); }

void free_ckpt_part_sender(CkptPartSender *s) {
    if (!s) return;
    free(s->tab.t);
    free(s->scratch);
    free(s);
}

void ckpt_send_parts(const Backend *be, const CkptTable *tab, uint8_t *scratch) {
    uint64_t count = 0;
    size_t at = 0;
    for (int i = 0; i < tab->n; i++)
        if (tab->t[i].device && is_split(&tab->t[i]) && tab->t[i].part_bytes) count++;
    WirePart *parts = fc_malloc(sizeof(WirePart) * (count ? count : 1));
    count = 0;
    for (int i = 0; i < tab->n; i++) {
        const CkptTensor *t = &tab->t[i];
        if (!t->device || !is_split(t) || !t->part_bytes) continue;
        parts[count++] = (WirePart){(uint64_t)i, t->part_offset, t->part_bytes};
        be->download(scratch + at, t->device, t->part_bytes);
        at += t->part_bytes;
    }
    dist_send(&count, sizeof count, 0);
    dist_send(parts, sizeof(WirePart) * count, 0);
    at = 0;
    for (uint64_t k = 0; k < count; k++) {  // one message a part: rank 0 receives each into its place
        dist_send(scratch + at, parts[k].bytes, 0);
        at += parts[k].bytes;
    }
    free(parts);
}

void ckpt_receive_parts(CkptTable *tab, int from) {
    uint64_t count = 0;
    dist_recv(&count, sizeof count, from);
    WirePart *parts = fc_malloc(sizeof(WirePart) * (count ? count : 1));
    dist_recv(parts, sizeof(WirePart) * count, from);
    for (uint64_t k = 0; k < count; k++) {  // each part straight into its place in the staging buffer
        const WirePart *p = &parts[k];
        CkptTensor *t = p->entry < (uint64_t)tab->n ? &tab->t[p->entry] : NULL;
        if (!t || !is_split(t) || p->offset + p->bytes > t->bytes)
            fc_die("rank %d sent a part of a checkpoint tensor this rank does not have (entry %llu): the ranks run "
                   "different builds or configs", from, (unsigned long long)p->entry);
        dist_recv((uint8_t *)t->host + p->offset, p->bytes, from);
    }
    free(parts);
}
