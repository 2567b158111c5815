// autoencoder.c: per-frame autoencoders read from safetensors files (see autoencoder.h; the math is
// docs/autoencoders.md): the file's header read and its family found, every tensor bound and checked
// before anything is allocated, then only those tensors read, the weights carved out of one backend
// allocation, and the plumbing of a pass (activation buffers of the largest map, reused layer after
// layer). The families' layers and passes are autoencoder_tiny.c and autoencoder_kl.c.
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/address_space.h"
#include "base/half.h"
#include "base/sha256.h"
#include "base/paths.h"
#include "model/autoencoder_internal.h"

// ----------------------------------------------------------------------------
// binding

const StEntry *ae_find(const AeBinder *bd, const char *name) {
    char full[256];
    snprintf(full, sizeof full, "%s%s", bd->prefix, name);
    return st_find(bd->f, full);
}

// The dimensions of shape without its trailing ones (at least one kept).
static int significant(const long *shape, int nd) {
    while (nd > 1 && shape[nd - 1] == 1) nd--;
    return nd;
}

void ae_bind(AeBinder *bd, real **slot, const char *name, int d0, int d1, int d2, int d3) {
    if (bd->failed) return;
    long want[4] = {d0, d1, d2, d3};
    int nd = 0;
    while (nd < 4 && want[nd] >= 0) nd++;
    const StEntry *e = ae_find(bd, name);
    char shape[64] = "(", *p = shape + 1;
    for (int i = 0; i < nd; i++) p += snprintf(p, 14, "%s%ld", i ? ", " : "", want[i]);
    snprintf(p, 4, ")");
    if (!e) {
        bd->failed = fc_errf(bd->err, bd->errlen, "%s: tensor %s%s %s is missing", bd->path, bd->prefix, name, shape);
        return;
    }
    int a = significant(e->shape, e->ndim), b = significant(want, nd);
    int ok = a == b && (!strcmp(e->dtype, "F32") || !strcmp(e->dtype, "F16") || !strcmp(e->dtype, "BF16"));
    for (int i = 0; ok && i < a; i++) ok = e->shape[i] == want[i];
    if (!ok) {
        char got[96] = "(", *q = got + 1;
        for (int i = 0; i < e->ndim && i < 6; i++) q += snprintf(q, 14, "%s%ld", i ? ", " : "", e->shape[i]);
        snprintf(q, 4, ")");
        bd->failed = fc_errf(bd->err, bd->errlen, "%s: tensor %s is %s %s, expected F32, F16 or BF16 %s", bd->path,
                             e->name, e->dtype, got, shape);
        return;
    }
    if (bd->n == AE_MAX_TENSORS) {
        bd->failed = fc_errf(bd->err, bd->errlen, "%s: more than %d tensors to read", bd->path, AE_MAX_TENSORS);
        return;
    }
    size_t numel = 1;
    for (int i = 0; i < nd; i++) numel *= (size_t)want[i];
    bd->slot[bd->n] = slot, bd->entry[bd->n] = e, bd->offset[bd->n] = bd->total;
    bd->total += numel, bd->n++;
}

void ae_bind_conv(AeBinder *bd, AeConv *c, const char *name, int cout, int cin, int k, int bias) {
    char full[160];
    *c = (AeConv){NULL, NULL, cout, cin, k};
    snprintf(full, sizeof full, "%s.weight", name);
    ae_bind(bd, &c->w, full, cout, cin, k, k);
    if (bias) {
        snprintf(full, sizeof full, "%s.bias", name);
        ae_bind(bd, &c->b, full, cout, -1, -1, -1);
    }
}

void ae_bind_norm(AeBinder *bd, AeNorm *n, const char *name, int C) {
    char full[160];
    n->C = C;
    snprintf(full, sizeof full, "%s.weight", name);
    ae_bind(bd, &n->gamma, full, C, -1, -1, -1);
    snprintf(full, sizeof full, "%s.bias", name);
    ae_bind(bd, &n->beta, full, C, -1, -1, -1);
}

// One value of a tensor's data as a double (F32, F16 or BF16, little-endian).
static double element(const StEntry *e, const uint8_t *data, size_t i) {
    if (!strcmp(e->dtype, "F32")) {
        float v;
        memcpy(&v, data + 4 * i, 4);
        return v;
    }
    uint16_t h = (uint16_t)(data[2 * i] | data[2 * i + 1] << 8);
    if (!strcmp(e->dtype, "BF16")) {
        uint32_t u = (uint32_t)h << 16;
        float v;
        memcpy(&v, &u, 4);
        return v;
    }
    return half_to_float(h);
}

// Allocate the weights and upload every bound tensor, each read from the file on its own: a whole
// Stable Diffusion checkpoint is gigabytes around an autoencoder of a few hundred megabytes. 0, or -1
// with err (a value that is not finite, a read error).
static int upload_bound(Autoencoder *ae, AeBinder *bd) {
    ae->n_params = bd->total;
    struct stat st;
    int fd = fc_open_regular(bd->path, &st, bd->err, bd->errlen);
    if (fd < 0) return -1;
    // the header parsed and the weights read from one file: another put in its place since the header
    // was read (a download renamed over it) is refused, not read at the first one's offsets
    uint8_t *head = fc_malloc(bd->f->data_start ? bd->f->data_start : 1);
    int same = (uint64_t)st.st_size == (uint64_t)bd->f->size && !fc_pread_all(fd, head, bd->f->data_start, 0) &&
               !memcmp(head, bd->f->bytes, bd->f->data_start);
    free(head);
    if (!same) {
        close(fd);
        return fc_errf(bd->err, bd->errlen, "%s: the file changed while it was read (%zu bytes, now %lld)", bd->path,
                       bd->f->size, (long long)st.st_size);
    }
    ae->file = st;
    real *host = fc_malloc(sizeof(real) * (bd->total ? bd->total : 1));
    uint8_t *data = NULL;
    size_t data_cap = 0;
    int rc = 0;
    for (int t = 0; t < bd->n && !rc; t++) {
        const StEntry *e = bd->entry[t];
        size_t numel = (t + 1 < bd->n ? bd->offset[t + 1] : bd->total) - bd->offset[t];
        size_t bytes = numel * st_dtype_size(e->dtype);
        if (bytes > data_cap) free(data), data = fc_malloc(bytes), data_cap = bytes;
        if (fc_pread_all(fd, data, bytes, (uint64_t)bd->f->data_start + e->begin)) {
            rc = fc_errf(bd->err, bd->errlen, "%s: tensor %s: read error (or the file changed while it was read): %s",
                         bd->path, e->name, strerror(errno));
            break;
        }
        for (size_t i = 0; i < numel && !rc; i++) {
            double v = element(e, data, i);
            if (!isfinite(v))
                rc = fc_errf(bd->err, bd->errlen, "%s: tensor %s holds a value that is not finite (element %zu)",
                             bd->path, e->name, i);
            host[bd->offset[t] + i] = (real)v;
        }
    }
    struct stat after;
    if (!rc && (fstat(fd, &after) || after.st_size != st.st_size || after.st_mtim.tv_sec != st.st_mtim.tv_sec ||
                after.st_mtim.tv_nsec != st.st_mtim.tv_nsec))
        rc = fc_errf(bd->err, bd->errlen, "%s: the file changed while it was read", bd->path);
    close(fd);
    free(data);
    if (rc) {
        free(host);
        return -1;
    }
    ae->params = ae->be->alloc(sizeof(real) * (bd->total ? bd->total : 1));
    ae->be->upload(ae->params, host, sizeof(real) * bd->total);
    free(host);
    for (int t = 0; t < bd->n; t++) *bd->slot[t] = ae->params + bd->offset[t];
    return 0;
}

// ----------------------------------------------------------------------------
// the file

// Every tensor under the autoencoder's own names (its encoder, decoder and quant convs; the rest of a
// whole checkpoint is not its) is one the network bound: a stage, resnet or layer this version does
// not build would be left out, and the round trip run another network than the file's. 0, or -1 with
// one line naming the first such tensor.
static int check_all_bound(const Autoencoder *ae, const AeBinder *bd) {
    static const char *const OWN[] = {"encoder.", "decoder.", "quant_conv.", "post_quant_conv."};
    size_t np = strlen(bd->prefix);
    for (int i = 0; i < bd->f->n; i++) {
        const StEntry *e = &bd->f->entries[i];
        if (strncmp(e->name, bd->prefix, np)) continue;
        int own = 0, bound = 0;
        for (size_t k = 0; k < sizeof OWN / sizeof OWN[0]; k++) own |= !strncmp(e->name + np, OWN[k], strlen(OWN[k]));
        // a half cut from a whole file may keep the other half's quant conv, which it never runs
        if ((!ae->has_enc && !strncmp(e->name + np, "quant_conv.", 11)) ||
            (!ae->has_dec && !strncmp(e->name + np, "post_quant_conv.", 16)))
            own = 0;
        for (int t = 0; own && t < bd->n && !bound; t++) bound = bd->entry[t] == e;
        if (own && !bound)
            return fc_errf(bd->err, bd->errlen, "%s: tensor %s is read by no layer of the network its other tensors "
                           "make, %s: a layer, resnet or stage this version does not build (the file holds another "
                           "network than the one it would run)", bd->path, ST_SHOWN(e->name), ae->what);
    }
    return 0;
}

// Whether the file is a PyTorch checkpoint by its first bytes: torch.save's zip archive (its first
// entry .../data.pkl) or a bare pickle (protocol 2 to 5, as the legacy format and .ckpt files have).
// 0 also when it cannot be read: the safetensors reader then says why.
static int is_pytorch_pickle(const char *path) {
    char why[512];
    FILE *in = fc_fopen_regular(path, why, sizeof why);
    if (!in) return 0;
    uint8_t b[30 + 256];
    size_t n = fread(b, 1, sizeof b, in);
    fclose(in);
    if (st_looks_like_safetensors(b, n)) return 0;  // a damaged safetensors whose header length starts 0x80 0x02..5
    if (n >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5) return 1;
    if (n < 30 || memcmp(b, "PK\x03\x04", 4)) return 0;
    size_t name = b[26] | (size_t)b[27] << 8;  // the first local file header's name length, the name at 30
    return name >= 4 && 30 + name <= n && !memcmp(b + 30 + name - 4, ".pkl", 4);
}

static int same_file_as_read(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

int autoencoder_file_sha256(const Autoencoder *ae, const char *path, char hex[65], char *err, size_t errlen) {
    long delay_ms = fc_test_hook("AE_HASH_DELAY_MS");  // the tests' replacement must be able to land first
    if (delay_ms > 0) {
        const char *mark = getenv("FRAMECHAIN_TEST_AE_HASH_MARK");  // the weights are read: the test may go on
        int m = mark && *mark ? open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0644) : -1;
        if (m >= 0) close(m);
        usleep((useconds_t)delay_ms * 1000);
    }
    struct stat at, after;
    int fd = fc_open_regular(path, &at, err, errlen);
    if (fd < 0) return -1;
    int rc = sha256_fd(fd, path, hex, err, errlen);
    int changed = fstat(fd, &after) || !same_file_as_read(&at, &after) ||
                  (ae->file.st_ino && !same_file_as_read(&ae->file, &at));
    if (!rc && changed)
        rc = fc_errf(err, errlen, "%s: the file changed since its weights were read (another put in its place, or "
                     "written to): run the command again once it stays as it is", path);
    close(fd);
    return rc;
}

int autoencoder_in_file(const StFile *f) {
    static const char *const FIRST[] = {"encoder.layers.0.weight", "decoder.layers.0.weight", "encoder.conv_in.weight",
                                        "decoder.conv_in.weight", "first_stage_model.encoder.conv_in.weight",
                                        "first_stage_model.decoder.conv_in.weight"};
    for (size_t i = 0; i < sizeof FIRST / sizeof FIRST[0]; i++)
        if (st_find(f, FIRST[i])) return 1;
    return 0;
}

Autoencoder *autoencoder_load(const char *path, const Backend *be, char *err, size_t errlen) {
    StFile f;  // the header alone: the tensors bound are read one by one (upload_bound)
    if (st_read_header(path, &f, err, errlen)) {
        if (is_pytorch_pickle(path))
            fc_errf(err, errlen, "%s: a PyTorch checkpoint (a pickle), not a safetensors file: framechain reads "
                    "only .safetensors and never unpickles (loading a pickle can run code); most autoencoders are "
                    "published as .safetensors beside the .ckpt or .pth (docs/autoencoders.md says where), an "
                    "AutoencoderKL's .ckpt or .pt (a whole Stable Diffusion 1.x/2.x checkpoint too) converts with "
                    "tools/vae_ckpt_to_safetensors.py IN.ckpt OUT.safetensors, and the original TAESD .pth pair with "
                    "tools/taesd_to_safetensors.py ENCODER DECODER OUT.safetensors", path);
        return NULL;
    }
    Autoencoder *ae = fc_calloc(1, sizeof *ae);
    ae->be = be, ae->scale = 1, ae->shift = 0;
    AeBinder *bd = fc_calloc(1, sizeof *bd);
    *bd = (AeBinder){.f = &f, .path = path, .prefix = "", .err = err, .errlen = errlen};
    int rc;
    int tiny = st_find(&f, "encoder.layers.0.weight") || st_find(&f, "decoder.layers.0.weight");
    int kl = st_find(&f, "encoder.conv_in.weight") || st_find(&f, "decoder.conv_in.weight");
    int kl_prefixed = st_find(&f, "first_stage_model.encoder.conv_in.weight") ||
                      st_find(&f, "first_stage_model.decoder.conv_in.weight");
    if (tiny + kl + kl_prefixed > 1) {  // one would be read and the other ignored: which one was meant?
        // each named by a half the file has (an encoder of one beside the decoder of the other, too)
        const char *tiny_half = st_find(&f, "encoder.layers.0.weight") ? "encoder" : "decoder",
                   *kl_half = st_find(&f, "encoder.conv_in.weight") ? "encoder" : "decoder";
        char first[64], second[64];
        if (tiny) snprintf(first, sizeof first, "a tiny autoencoder (%s.layers.*)", tiny_half);
        else snprintf(first, sizeof first, "an AutoencoderKL (%s.conv_in.*)", kl_half);
        if (kl_prefixed) snprintf(second, sizeof second, "an AutoencoderKL under first_stage_model.*");
        else snprintf(second, sizeof second, "an AutoencoderKL (%s.conv_in.*)", kl_half);
        rc = fc_errf(err, errlen, "%s: holds the tensors of two autoencoders, %s and %s: a file must hold one", path,
                     first, second);
    } else if (tiny) {
        rc = ae_bind_tiny(ae, bd);
    } else if (kl || kl_prefixed) {
        rc = ae_bind_kl(ae, bd);
    } else if (st_find(&f, "1.conv.0.weight") || (st_find(&f, "1.weight") && st_find(&f, "3.conv.0.weight"))) {
        // the original nn.Sequential halves (.pth, or the same names as .safetensors): the encoder's layer 1
        // is a block, the decoder's a convolution after the soft clamp (layer 0, no weights)
        rc = fc_errf(err, errlen, "%s: a TAESD %s in the original layout (Sequential's names, %s): convert it and its "
                     "other half with tools/taesd_to_safetensors.py ENCODER DECODER OUT.safetensors (.pth or "
                     ".safetensors halves; - for one left out)", path,
                     st_find(&f, "1.conv.0.weight") ? "encoder" : "decoder",
                     st_find(&f, "1.conv.0.weight") ? "1.conv.0.weight, ..." : "1.weight, 3.conv.0.weight, ...");
    } else {
        rc = fc_errf(err, errlen, "%s: no autoencoder this version reads (the tiny autoencoders' encoder.layers.0.weight "
                     "or an AutoencoderKL's encoder.conv_in.weight, either half; its first tensor: %s)", path,
                     f.n ? ST_SHOWN(f.entries[0].name) : "none");
    }
    if (rc == 0) rc = bd->failed || check_all_bound(ae, bd) ? -1 : upload_bound(ae, bd);
    free(bd);
    st_free(&f);
    if (rc) {
        free_autoencoder(ae);
        return NULL;
    }
    size_t used = strlen(ae->what);
    snprintf(ae->what + used, sizeof ae->what - used, ", %d latent channels, %dx, %s, %.2f M parameters", ae->latent,
             ae->factor, ae->has_enc && ae->has_dec ? "encoder and decoder" : ae->has_enc ? "encoder only" : "decoder only",
             ae->n_params / 1e6);
    return ae;
}

void free_autoencoder(Autoencoder *ae) {
    if (!ae) return;
    if (ae->params) ae->be->free(ae->params);
    for (int i = 0; i < 6; i++)
        if (ae->buf[i]) ae->be->free(ae->buf[i]);
    free(ae->net);
    free(ae);
}

int autoencoder_family(const Autoencoder *ae) { return ae->family; }
int autoencoder_latent_channels(const Autoencoder *ae) { return ae->latent; }
int autoencoder_factor(const Autoencoder *ae) { return ae->factor; }
int autoencoder_has_encoder(const Autoencoder *ae) { return ae->has_enc; }
int autoencoder_has_decoder(const Autoencoder *ae) { return ae->has_dec; }
const char *autoencoder_describe(const Autoencoder *ae) { return ae->what; }
void autoencoder_scaling(const Autoencoder *ae, double *scale, double *shift) { *scale = ae->scale, *shift = ae->shift; }
void autoencoder_set_scaling(Autoencoder *ae, double scale, double shift) { ae->scale = scale, ae->shift = shift; }

// ----------------------------------------------------------------------------
// a pass

size_t ae_values(const AeRun *r) { return (size_t)r->B * r->C * r->H * r->W; }

void ae_swap(real **x, real **y) {
    real *t = *x;
    *x = *y, *y = t;
}

void ae_conv(AeRun *r, const AeConv *c, int stride, const int *pad) {
    int p = c->k / 2, sym[4] = {p, p, p, p};
    const int *pd = pad ? pad : sym;
    r->be->conv2d_fwd(r->t[0], r->cur, c->w, c->b, r->B, c->cin, r->H, r->W, c->cout, c->k, stride, pd);
    r->H = (r->H + pd[0] + pd[2] - c->k) / stride + 1, r->W = (r->W + pd[1] + pd[3] - c->k) / stride + 1;
    r->C = c->cout;
    ae_swap(&r->cur, &r->t[0]);
}

void ae_upsample(AeRun *r) {
    r->be->upsample2x_fwd(r->t[0], r->cur, r->B, r->C, r->H, r->W);
    r->H *= 2, r->W *= 2;
    ae_swap(&r->cur, &r->t[0]);
}

// Six buffers of `values` each (grown when a pass needs more), as a pass of B images of C x H x W.
static AeRun run_start(Autoencoder *ae, size_t values, int B, int C, int H, int W) {
    if (values > ae->buf_values) {
        for (int i = 0; i < 6; i++) {
            if (ae->buf[i]) ae->be->free(ae->buf[i]);
            ae->buf[i] = ae->be->alloc(sizeof(real) * values);
        }
        ae->buf_values = values;
    }
    return (AeRun){ae->be, ae->buf[0], {ae->buf[1], ae->buf[2], ae->buf[3], ae->buf[4], ae->buf[5]}, B, C, H, W};
}

double autoencoder_memory_bytes(const Autoencoder *ae, int B, int H, int W) {
    return (double)sizeof(real) * ((double)ae->n_params + 6.0 * B * ae_map_values(ae, H, W));
}

double autoencoder_scratch_bytes(const Autoencoder *ae, int H, int W) {
    double tile = (double)ae->be->conv_tile_bytes();
    double conv = 9.0 * sizeof(real) * (double)ae_map_values(ae, H, W);  // Cin k k x Ho Wo <= 9 x a map
    double n = (double)(H / ae->factor) * (W / ae->factor);             // the mid block's tokens
    double need = conv > sizeof(real) * n * n ? conv : sizeof(real) * n * n;
    return need < tile ? need : tile;
}

int autoencoder_check_address_space(const Autoencoder *ae, const char *path, int P, const char *lower, char *err,
                                    size_t errlen) {
    if (strcmp(ae->be->name, "cpu")) return 0;
    const double GiB = 1073741824.0;
    double own = autoencoder_memory_bytes(ae, 1, P, P) + autoencoder_scratch_bytes(ae, P, P), limit, used;
    double need = own + fc_address_space_to_come(fc_threads());
    const char *ulimit;
    if (fc_address_space_room(need, &limit, &used, &ulimit)) return 0;
    return fc_errf(err, errlen, "%s: the autoencoder's %.2f GiB for a %dx%d frame and OpenBLAS's buffers for %d thread%s%s "
                   "need %.2f GiB more address space, and the limit leaves %.2f GiB: raise it (%s %.0f or more) or "
                   "lower %s", path, own / GiB, P, P, fc_threads(), fc_threads() == 1 ? "" : "s",
                   fc_thread_stack_clause((char[96]){0}, 96), need / GiB, (limit - used) / GiB, ulimit,
                   fc_address_space_advice_kib(used + need), lower);
}

int autoencoder_encode(Autoencoder *ae, const real *frames, int B, int H, int W, real *latents, char *err,
                       size_t errlen) {
    if (!ae->has_enc) return fc_errf(err, errlen, "the autoencoder has no encoder (its file holds a decoder only)");
    int f = ae->factor;
    if (H % f || W % f || H < f || W < f)
        return fc_errf(err, errlen, "frames of %dx%d: the encoder takes sides that are multiples of %d", W, H, f);
    AeRun r = run_start(ae, (size_t)B * ae_map_values(ae, H, W), B, 3, H, W);
    ae->be->upload(r.cur, frames, sizeof(real) * ae_values(&r));
    ae->encode(ae, &r);
    ae->be->download(latents, r.cur, sizeof(real) * ae_values(&r));
    return 0;
}

int autoencoder_decode(Autoencoder *ae, const real *latents, int B, int h, int w, real *frames, char *err,
                       size_t errlen) {
    if (!ae->has_dec) return fc_errf(err, errlen, "the autoencoder has no decoder (its file holds an encoder only)");
    if (h < 1 || w < 1) return fc_errf(err, errlen, "latents of %dx%d", w, h);
    AeRun r = run_start(ae, (size_t)B * ae_map_values(ae, h * ae->factor, w * ae->factor), B, ae->latent, h, w);
    ae->be->upload(r.cur, latents, sizeof(real) * ae_values(&r));
    ae->decode(ae, &r);
    ae->be->download(frames, r.cur, sizeof(real) * ae_values(&r));
    return 0;
}
