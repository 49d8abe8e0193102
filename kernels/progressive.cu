// Entropy decoding of progressive JPEG scans into DCT coefficients
// (T.81 Annex G.1.2), so that progressive files, which neither the hardware
// engine nor nvJPEG's GPU Huffman decodes, need no CPU Huffman work
// (issue 16: on photos/imagenet-size their CPU Huffman alone costs about
// 0.1 CPU-ms per image averaged over all images). Sequential scans too
// (F.2.2, a scan with Ss = 0, Se = 63): the Huffman work that the CUDA
// route's share otherwise puts on the CPU, about 1 CPU-ms per image.
//
// One thread block per chain (scan.cuh): the DC scans of an image, or the
// AC scans of one of its components, or every scan of a sequential image
// (one chain: its Huffman decoding is serial). Chains write disjoint coefficients
// (DC and AC scans code disjoint bands, T.81 G.1.1.1.1), so they need no
// ordering between them; within a chain the scans run in file order, as
// refinement scans build on the bits before them: in turn on one thread,
// or block by block in a pipeline, a warp each ("Scans in a pipeline").
//
// The procedures (entropy.cuh) follow libjpeg's jdphuff.c (jdhuff.c for
// sequential scans), which the tests compare with
// bit for bit: same coefficient values, same treatment of run lengths past
// the band (its natural-order table's 16 extra entries). Where libjpeg
// warns and goes on (a bad code, bits past a marker, a missing restart
// marker), the chain stops with a status instead, and the image goes to
// another decoder: no read leaves the segment, no write leaves the grid.
#include "scan.cuh"
#include "entropy.cuh"

// ---- Scans in a pipeline ----
//
// A chain's scans run in file order because each refinement scan builds on
// the bits before it; but only block by block: scan k's decoding of block
// (or MCU) m reads and writes that block alone, after the scans before it
// are done with it. Where every scan of a chain codes the same components
// (a component's AC scans; DC scans of one component list), they visit the
// blocks in the same order, so scan k can run one warp behind scan k - 1
// instead of after it: the chain then lasts about as long as its longest
// scan, not their sum (the luma's AC chain of a progressive photo is four
// scans, its longest under half the chain's bytes; docs/BENCHMARKS.md).
// Each scan publishes the blocks it has finished in shared memory after a
// fence; the next waits until every scan before it has passed block m.
// Every write a scan makes to a block happens while it decodes that block
// (the run-length overshoot past the band too: libjpeg's natural-order
// table writes inside the block), so each block sees the scans' writes in
// file order, exactly as one thread decoding them in turn: where no scan
// faults, the coefficients are the serial decode's. Where one does, the
// chain's status is still the first faulting scan's in file order, as in
// turn, but the scans after it stop wherever they had got to, having
// refined blocks that the serial decode, stopped at the fault, never
// would: the coefficients then depend on timing. Such a file goes to the
// CPU, its pixels unused (stage/cuda/prog_route.rs).
struct GfPipe {
    unsigned int* done;      // shared: blocks finished per scan (~0u: scan over)
    unsigned int* first;     // shared: (scan << 8) | status of the first fault
    unsigned int k;          // this scan's index in the chain
    unsigned int ready;      // blocks every earlier scan has finished, as last seen
};

#define GF_PIPE_OVER 0xFFFFFFFFu
#define GF_PIPE_NO_FAULT 0xFFFFFFFFu

// Wait until every scan before this one has finished block m; false where
// one of them faulted (this scan's work no longer matters).
__device__ __forceinline__ bool gf_pipe_wait(GfPipe& p, unsigned int m) {
    while (p.ready <= m) {
        unsigned int r = GF_PIPE_OVER;
        for (unsigned int j = 0; j < p.k; ++j) {
            const unsigned int d = atomicAdd(&p.done[j], 0u);
            r = d < r ? d : r;
        }
        // Orders the coefficient reads, and the fault's, after the counts
        // that allow them: a scan that faults records it before it
        // publishes that it is over.
        __threadfence_block();
        if ((atomicAdd(p.first, 0u) >> 8) < p.k) return false;
        p.ready = r;
        if (r <= m) __nanosleep(100);
    }
    return true;
}

// This scan has finished `blocks` blocks: its writes to them first.
__device__ __forceinline__ void gf_pipe_publish(GfPipe* p, unsigned int blocks) {
    if (p == 0) return;
    __threadfence_block();
    atomicExch(&p->done[p->k], blocks);
}

// gf_scan's decoding of MCU m may start (it waits in a pipeline).
__device__ __forceinline__ bool gf_pipe_may(GfPipe* p, unsigned int m) {
    return p == 0 || gf_pipe_wait(*p, m);
}

// Not inlined, with one call of the block decoder: inlined at both of
// gf_chain_scans' calls, each with two calls of the decoder (interleaved
// scans and not), gf_progressive held four copies of it, and NVRTC took
// 20 s over this file on a 2-core VM (5 s so), which a cold kernel cache
// adds to a pipeline's build() (time to first batch, issue 20). It is
// called once per scan, so the call costs nothing that counts.
__device__ __noinline__ unsigned int gf_scan(const GfChain& ch, const GfScan& s,
                                             const GfHuff* tables, unsigned int n_tables,
                                             GfPipe* pipe) {
    if (!gf_scan_ok(ch, s, n_tables)) return GF_SCAN_BAD_DESC;
    GfBits b = gf_reader(ch, s, 0);
    GfScanState st;
    for (int i = 0; i < 4; ++i) st.pred[i] = 0;
    st.eobrun = 0;
    const bool interleaved = s.comps > 1;
    const GfCoefs& c0 = ch.comp[s.comp[0]];
    const unsigned int across = interleaved ? ch.mcus_x : c0.bw;
    const unsigned int mcus = interleaved ? ch.mcus_x * ch.mcus_y : c0.bw * c0.bh;
    unsigned int togo = s.restart, number = 0;
    for (unsigned int m = 0; m < mcus; ++m) {
        if (!gf_pipe_may(pipe, m)) return GF_SCAN_OK;
        if (s.restart != 0) {
            if (togo == 0) {
                gf_restart(b, number++);
                for (int i = 0; i < 4; ++i) st.pred[i] = 0;
                st.eobrun = 0;
                togo = s.restart;
            }
            togo -= 1;
        }
        const unsigned int mx = m % across, my = m / across;
        // A non-interleaved scan's MCU is one block of its component.
        const int comps = interleaved ? s.comps : 1;
        for (int i = 0; i < comps; ++i) {
            const GfCoefs& c = ch.comp[s.comp[i]];
            const unsigned int h = interleaved ? c.h : 1u, v = interleaved ? c.v : 1u;
            for (unsigned int y = 0; y < v; ++y) {
                for (unsigned int x = 0; x < h; ++x) {
                    short* blk = gf_block(c, mx * h + x, my * v + y);
                    if (blk == 0) return GF_SCAN_BAD_DESC;
                    gf_block_decode(b, s, tables, st, i, blk);
                }
            }
        }
        if (b.status != GF_SCAN_OK) return b.status;
        gf_pipe_publish(pipe, m + 1);
    }
    return GF_SCAN_OK;
}

// Whether chain `ch`'s scans (valid indices) all code the same components
// in the same order, so that they visit the blocks in one order.
__device__ __forceinline__ bool gf_same_components(const GfChain& ch, const GfScan* scans) {
    const GfScan& a = scans[ch.first_scan];
    for (unsigned int k = 1; k < ch.scans; ++k) {
        const GfScan& b = scans[ch.first_scan + k];
        if (b.comps != a.comps) return false;
        for (int i = 0; i < a.comps && i < 4; ++i)
            if (b.comp[i] != a.comp[i]) return false;
    }
    return true;
}

// What a chain's block shares: the pipeline's counts and first fault, and
// what thread 0 found the chain to need.
struct GfChainBlock {
    unsigned int done[GF_SCAN_WARPS_MAX];
    unsigned int first;      // (scan << 8) | status of the first fault in file order
    unsigned int mode;       // GF_CHAIN_*
};

#define GF_CHAIN_SKIP 0      // split, or a fault already: nothing to do
#define GF_CHAIN_SERIAL 1    // warp 0 decodes the scans in turn
#define GF_CHAIN_PIPED 2     // warp k decodes scan k
#define GF_CHAIN_BAD 3       // a descriptor out of range

// Thread 0: the chain's mode and the block's counts (status: see
// gf_progressive).
__device__ __forceinline__ void gf_chain_begin(GfChainBlock& sh, const GfChain* chains,
                                               const GfScan* scans, unsigned int n_scans,
                                               unsigned int* status, unsigned int i) {
    if (threadIdx.x != 0) return;
    sh.first = GF_PIPE_NO_FAULT;
    for (unsigned int w = 0; w < GF_SCAN_WARPS_MAX; ++w) sh.done[w] = 0;
    const unsigned int pre = status[i];
    if (pre != GF_SCAN_OK) {
        if (pre == GF_SCAN_SPLIT) status[i] = GF_SCAN_OK;
        sh.mode = GF_CHAIN_SKIP;
        return;
    }
    const GfChain& ch = chains[i];
    const unsigned int w32 = blockDim.x / 32;
    const unsigned int warps = w32 == 0 ? 1u : (w32 > GF_SCAN_WARPS_MAX ? GF_SCAN_WARPS_MAX : w32);
    if (ch.comps == 0 || ch.comps > 4 || ch.first_scan > n_scans ||
        ch.scans > n_scans - ch.first_scan)
        sh.mode = GF_CHAIN_BAD;
    else if (ch.scans > 1 && ch.scans <= warps && gf_same_components(ch, scans))
        sh.mode = GF_CHAIN_PIPED;
    else
        sh.mode = GF_CHAIN_SERIAL;
}

// Lane 0 of each warp: its part of the chain's scans.
__device__ __forceinline__ void gf_chain_scans(GfChainBlock& sh, const GfChain* chains,
                                               const GfScan* scans, const GfHuff* tables,
                                               unsigned int n_tables, unsigned int i) {
    const unsigned int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 != 0) return;
    const GfChain& ch = chains[i];
    if (sh.mode == GF_CHAIN_PIPED && warp < ch.scans) {
        GfPipe p;
        p.done = sh.done;
        p.first = &sh.first;
        p.k = warp;
        p.ready = 0;
        const unsigned int st = gf_scan(ch, scans[ch.first_scan + warp], tables, n_tables, &p);
        if (st != GF_SCAN_OK) atomicMin(&sh.first, (warp << 8) | st);
        // Over, faulted or not: the scans after it go on (or stop).
        gf_pipe_publish(&p, GF_PIPE_OVER);
    } else if (sh.mode == GF_CHAIN_SERIAL && warp == 0) {
        for (unsigned int k = 0; k < ch.scans; ++k) {
            const unsigned int st = gf_scan(ch, scans[ch.first_scan + k], tables, n_tables, 0);
            if (st != GF_SCAN_OK) {
                sh.first = (k << 8) | st;
                break;
            }
        }
    }
}

// Thread 0: the chain's status.
__device__ __forceinline__ void gf_chain_end(const GfChainBlock& sh, unsigned int* status,
                                             unsigned int i) {
    if (threadIdx.x != 0 || sh.mode == GF_CHAIN_SKIP) return;
    status[i] = sh.mode == GF_CHAIN_BAD ? GF_SCAN_BAD_DESC
                : sh.first == GF_PIPE_NO_FAULT ? GF_SCAN_OK
                                               : (sh.first & 0xFFu);
}

// One block per chain (blockIdx.x), of blockDim.x / 32 warps (at most
// GF_SCAN_WARPS_MAX count): lane 0 of warp k decodes scan k where the
// chain's scans can run in a pipeline (above) and are no more than the
// warps, else warp 0 decodes them in turn; the other lanes only keep the
// block's barriers. status[i] gets chain i's GF_SCAN_* code. It must hold
// 0 before, or what the split kernels left there: GF_SCAN_SPLIT (they
// decoded the chain) or the scan's fault they met; 0 on a split chain
// means its decode faulted and its descriptor puts blocks outside their
// grids (gf_split_fault), and this block decodes it.
extern "C" __global__ void gf_progressive(const GfChain* __restrict__ chains, unsigned int n,
                                          const GfScan* __restrict__ scans, unsigned int n_scans,
                                          const GfHuff* __restrict__ tables, unsigned int n_tables,
                                          unsigned int* __restrict__ status) {
    __shared__ GfChainBlock sh;
    const unsigned int i = blockIdx.x;
    if (i >= n) return;
    gf_chain_begin(sh, chains, scans, n_scans, status, i);
    __syncthreads();
    gf_chain_scans(sh, chains, scans, tables, n_tables, i);
    __syncthreads();
    gf_chain_end(sh, status, i);
}

// ---- Split decoding of sequential scans (issue 16, item 3c) ----
//
// One thread per sequential image is latency-bound: on an H200 a batch of
// 256 imagenet-size photos took 49 ms (2026-11-27, docs/BENCHMARKS.md),
// the slowest photo's time. A sequential scan is therefore cut into
// subsequences of sub_bytes, one thread each, as in Weissenberger and
// Schmidt, "Massively Parallel Huffman Decoding on GPUs" (ICPP 2018), and
// its JPEG sequel (arXiv 2111.09219):
//
// 1. gf_split_guess: each thread decodes its subsequence from a guess (its
//    first byte, the MCU's first block, the DC next). Huffman codes
//    resynchronise: a few symbols in, the guess usually decodes what the
//    true decode would, and the state where it stops is the true one.
//    Where the scan has restart markers, the guess is the first interval
//    that starts in the subsequence's bytes instead ("Restart intervals",
//    below): there it is exact.
// 2. gf_split_round, `rounds` times: each thread whose predecessor's end
//    state is not where it started decodes again from there. The rounds
//    are what runs in parallel; what they leave out of step, step 3 mends
//    one subsequence after another (before session 48 such a chain went
//    whole to one thread: a megapixel photo's scan, hundreds of ms, and a
//    batch waits for its slowest chain).
// 3. gf_split_check, per chain, in order: a subsequence that did not start
//    where the one before it ended is decoded again from there (the
//    rounds left it out of step), so that every start is the true one, by
//    induction from the scan's first bit: nothing here is probabilistic.
//    Then, if the blocks begun cover the scan, the block index and DC
//    prediction at each subsequence's start (prefix sums). Where the
//    decode so chained faults in a block of the scan, that fault is the
//    chain's status; where past the scan's last block, the subsequences
//    after the fault hold nothing of the scan (gf_split_fault). Only a
//    chain whose blocks are not all in their grids, and that faults,
//    keeps status 0, and gf_progressive decodes it alone.
// 4. gf_split_write: each subsequence again, from its true start, writing
//    its coefficients; a fault in a block of the scan is the chain's status.
//
// Bit positions count the segment's bytes as they are, stuffing included,
// so that threads that started at different places agree on them.
//
// Restart intervals (T.81 F.1.2.3; session 50). Until then a scan with
// restart markers went whole to one thread, and cameras and editors write
// them into large photos (in the corpus: a 9.9 MB Fujifilm MPO, a 6000 x
// 6000 image, Photoshop files). An interval starts
// on the byte after its marker with the decoder's state known: the MCU's
// first block, DC predictions 0. So a subsequence's guess is the first
// interval whose start lies in its bytes (none: it has no work of its
// own, and the check or a round gives it its predecessor's end), a run
// stops only at an interval's start at or past its stop, so that every
// state a record holds is one, and the check's DC sums start again at
// every record. A marker out of place or out of turn (gf_restart) is a
// fault before the block that would follow it. Everything else is as
// without restarts, the check's induction included: a guess counts only
// once the true decode is seen to arrive where it starts.
//
// One table for every block (session 51). Where every block of the MCU
// is decoded with the same DC and AC tables (RGB-coded files, Adobe
// transform 0: libjpeg gives all three components tables 0), a guess that
// found the symbols' boundaries can still be a block off in the MCU, and
// nothing in the bits ever tells it: the true state then travelled one
// subsequence per round and the check decoded the rest again, serially
// (at 256 bytes and 16 rounds, 728 of one 2000 x 1280 file's
// subsequences). In such a scan without restart markers (`phaseless`,
// MCUs of at most 4 blocks) the block within the MCU is left out of the
// states compared, a run sums its DC differences by the block's place
// counted from its own start, and the check, which knows every record's
// first block (`base`), adds each sum to its component and gives the
// write its true place. The bits decoded are the same whatever the place,
// so the induction still holds on what is compared.

// The bit in the segment where the next unread bit of `b` starts.
__device__ __forceinline__ unsigned int gf_at(const GfBits& b) {
    const int real = b.n - b.zeros;  // unread bits from the segment
    if (real <= 0) return b.pos * 8;
    const int bytes = (real + 7) >> 3;
    const unsigned int m = (b.mask >> (b.zeros >> 3)) & ((1u << bytes) - 1u);
    return b.pos * 8 - (unsigned int)real - 8u * (unsigned int)__popc(m);
}

// The blocks of one MCU: scan component, and place within its h x v.
struct GfMcu {
    unsigned int n;
    unsigned char comp[10], x[10], y[10];
    bool phaseless;  // "One table for every block" above
};

// The chain's scan if it can be split (a sequential scan that gf_scan_ok
// accepts), with its MCU and its blocks in all.
__device__ __forceinline__ const GfScan* gf_split_scan(const GfSplit& p, const GfChain& ch,
                                                       GfMcu& m, unsigned int& total) {
    const GfScan* scans = (const GfScan*)p.scans;
    if (ch.comps == 0 || ch.comps > 4 || ch.scans != 1 || ch.first_scan >= p.n_scans) return 0;
    const GfScan& s = scans[ch.first_scan];
    if (!gf_scan_ok(ch, s, p.n_tables) || s.ss != 0 || s.se != 63) return 0;
    m.n = 0;
    if (s.comps == 1) {
        m.n = 1;
        m.comp[0] = m.x[0] = m.y[0] = 0;
        const GfCoefs& c = ch.comp[s.comp[0]];
        total = c.bw * c.bh;
    } else {
        for (int i = 0; i < s.comps; ++i) {
            const GfCoefs& c = ch.comp[s.comp[i]];
            for (unsigned int y = 0; y < c.v; ++y)
                for (unsigned int x = 0; x < c.h; ++x) {
                    if (m.n == 10) return 0;
                    m.comp[m.n] = (unsigned char)i;
                    m.x[m.n] = (unsigned char)x;
                    m.y[m.n] = (unsigned char)y;
                    m.n += 1;
                }
        }
        total = ch.mcus_x * ch.mcus_y * m.n;
    }
    if (total == 0 || m.n == 0) return 0;
    m.phaseless = s.restart == 0 && m.n > 1 && m.n <= 4;
    for (unsigned int u = 1; u < m.n && m.phaseless; ++u)
        m.phaseless = s.dc[m.comp[u]] == s.dc[m.comp[0]] && s.ac[m.comp[u]] == s.ac[m.comp[0]];
    return &s;
}

// Block g of the scan, in scan order, or null outside its grid.
__device__ __forceinline__ short* gf_split_block(const GfChain& ch, const GfScan& s,
                                                 const GfMcu& m, unsigned int g) {
    const unsigned int mi = g / m.n, u = g % m.n;
    if (s.comps == 1) {
        const GfCoefs& c = ch.comp[s.comp[0]];
        return gf_block(c, mi % c.bw, mi / c.bw);
    }
    const GfCoefs& c = ch.comp[s.comp[m.comp[u]]];
    return gf_block(c, (mi % ch.mcus_x) * c.h + m.x[u], (mi / ch.mcus_x) * c.v + m.y[u]);
}

// The number of the restart marker that ends the interval starting at
// `from` (an interval's start): RST0 for the scan's first, else one past
// the marker just before it, as gf_restart counts them from the first.
__device__ __forceinline__ unsigned int gf_split_number(const GfChain& ch, const GfScan& s,
                                                        const GfAt& from) {
    const unsigned int at = from.pos >> 3;
    if (at == 0 || at > s.length) return 0;
    const unsigned char* d = (const unsigned char*)ch.data + s.offset;
    return (d[at - 1] + 1u) & 7u;  // 0xD0 + n: (n + 1) mod 8
}

// Decode from `from` until the next symbol would start at or past bit
// `stop` (with restart markers: until an interval would start there), or
// a fault: the state there and what was met on the way, in `out` (its
// `from`, `base` and `dc_base` untouched; where m.phaseless, out.dc[j]
// sums the DC differences of the blocks begun j, j + m.n, ... after
// `from`, and out.to.u means nothing). WRITE: also store the
// coefficients of the blocks below `total`, block numbers from out.base
// and DC predictions from out.dc_base on, and return the first fault in
// such a block, or before it (a restart marker's); faults in the padding
// after the scan's last block are not the scan's. Each step is
// gf_seq_block's, and gf_scan's between intervals.
template <bool WRITE>
__device__ unsigned int gf_split_run(const GfChain& ch, const GfScan& s, const GfHuff* tables,
                                     const GfMcu& m, GfAt from, unsigned int stop,
                                     unsigned int total, GfSync& out) {
    GfBits b = gf_reader(ch, s, from.pos >> 3);
    if ((from.pos & 7) != 0) {
        gf_fill(b);
        gf_skip(b, (int)(from.pos & 7));
    }
    unsigned int u = from.u, k = from.k, blocks = 0;
    unsigned int dc[4] = {0, 0, 0, 0}, pred[4] = {0, 0, 0, 0};
    // With restart markers `from` is an interval's start: MCUs left in it,
    // the number of the marker that ends it, and whether the run is at
    // an interval's start (the only place it may stop).
    const bool rst = s.restart != 0;
    unsigned int togo = s.restart, number = rst ? gf_split_number(ch, s, from) : 0u;
    bool fresh = true;
    short* blk = 0;
    if (WRITE) {
        for (int i = 0; i < 4; ++i) pred[i] = (unsigned int)out.dc_base[i];
        // A start inside a block: the one begun last before it.
        if (k != 0 && out.base > 0 && out.base - 1 < total) blk = gf_split_block(ch, s, m, out.base - 1);
    }
    unsigned int fault = GF_SCAN_OK;
    while (u < m.n && k < 64) {
        if (gf_at(b) >= stop && (fresh || !rst)) break;
        // The block this symbol belongs to, in scan order.
        const unsigned int g = out.base + blocks - (k != 0 ? 1u : 0u);
        if (WRITE && k == 0 && g >= total) break;
        if (rst && k == 0 && u == 0) {
            if (togo == 0) {
                gf_restart(b, number++);
                if (b.status != GF_SCAN_OK) {
                    if (WRITE) fault = b.status;
                    break;
                }
                for (int i = 0; i < 4; ++i) dc[i] = pred[i] = 0;
                togo = s.restart;
                fresh = true;
                continue;
            }
            togo -= 1;
        }
        fresh = false;
        const int i = m.comp[u];
        if (k == 0) {
            const int t = gf_huff(b, tables[s.dc[i]]);
            const unsigned int diff = (unsigned int)gf_extend(gf_bits(b, t), t);
            dc[m.phaseless ? blocks % m.n : (unsigned int)i] += diff;
            if (WRITE) {
                pred[i] += diff;
                blk = gf_split_block(ch, s, m, g);
                if (blk == 0) {
                    fault = GF_SCAN_BAD_DESC;
                    break;
                }
                blk[0] = (short)(int)pred[i];
            }
            blocks += 1;
            k = 1;
        } else {
            const int rs = gf_huff(b, tables[s.ac[i]]);
            const int r = rs >> 4, z = rs & 15;
            if (z != 0) {
                k += r;
                const int v = gf_extend(gf_bits(b, z), z);
                if (WRITE && blk != 0) blk[gf_natural[k]] = (short)v;
                k += 1;
            } else if (r == 15) {
                k += 16;
            } else {
                k = 64;
            }
        }
        if (b.status != GF_SCAN_OK) {
            if (WRITE && g < total) fault = b.status;
            break;
        }
        if (k >= 64) {
            k = 0;
            u = u + 1 == m.n ? 0 : u + 1;
        }
    }
    out.to.pos = gf_at(b);
    out.to.u = (unsigned char)u;
    out.to.k = (unsigned char)k;
    out.to.ok = b.status == GF_SCAN_OK && fault == GF_SCAN_OK;
    out.to.fault = (unsigned char)(fault != GF_SCAN_OK ? fault : b.status);
    out.blocks = blocks;
    for (int i = 0; i < 4; ++i) out.dc[i] = (int)dc[i];
    return fault;
}

// The chain that subsequence t belongs to (sub_first is sorted, from 0 to
// n_subs), or n if none does.
__device__ __forceinline__ unsigned int gf_split_chain(const GfSplit& p, unsigned int t) {
    const unsigned int* first = (const unsigned int*)p.sub_first;
    if (t >= p.n_subs || first[0] != 0 || first[p.n] != p.n_subs) return p.n;
    unsigned int lo = 0, hi = p.n;  // first[lo] <= t < first[hi]
    while (hi - lo > 1) {
        const unsigned int mid = (lo + hi) / 2;
        if (first[mid] <= t) lo = mid;
        else hi = mid;
    }
    return first[lo] <= t && t < first[lo + 1] ? lo : p.n;
}

// Subsequence t's chain, scan, MCU and place: false if it has none, or if
// the chain's subsequences are not the ones its scan's length makes.
struct GfSub {
    const GfChain* ch;
    const GfScan* s;
    GfMcu m;
    unsigned int total, j, stop;
};

// Where subsequence j of a chain's subs stops. The last one runs on past
// the segment's end, as one thread would (into zero bits: an overrun if a
// block of the scan needs them).
__device__ __forceinline__ unsigned int gf_split_stop(const GfSplit& p, unsigned int j,
                                                      unsigned int subs) {
    return j + 1 == subs ? 0xFFFFFFFFu : (j + 1) * p.sub_bytes * 8;
}

__device__ __forceinline__ bool gf_split_sub(const GfSplit& p, unsigned int t, GfSub& q) {
    const unsigned int c = gf_split_chain(p, t);
    if (c >= p.n || p.sub_bytes == 0) return false;
    const unsigned int* first = (const unsigned int*)p.sub_first;
    q.ch = (const GfChain*)p.chains + c;
    q.s = gf_split_scan(p, *q.ch, q.m, q.total);
    if (q.s == 0) return false;
    const unsigned int subs = (q.s->length + p.sub_bytes - 1) / p.sub_bytes;
    if (first[c + 1] - first[c] != subs) return false;
    q.j = t - first[c];
    q.stop = gf_split_stop(p, q.j, subs);
    return true;
}

// Where m.phaseless, the block within the MCU is not compared: the bits
// decode the same from either state.
__device__ __forceinline__ bool gf_at_eq(const GfAt& a, const GfAt& b, const GfMcu& m) {
    return a.ok && b.ok && a.pos == b.pos && (m.phaseless || a.u == b.u) && a.k == b.k;
}

// Step 1, one thread per subsequence: records[t] from a guess.
extern "C" __global__ void gf_split_guess(GfSplit p) {
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    GfSub q;
    if (!gf_split_sub(p, t, q)) return;
    GfSync& r = ((GfSync*)p.sync)[t];
    GfAt from;
    from.pos = 0;
    from.u = from.k = 0;
    from.ok = 1;
    from.fault = GF_SCAN_OK;
    const unsigned char* d = (const unsigned char*)q.ch->data + q.s->offset;
    const unsigned int lo = q.j * p.sub_bytes;
    r.base = 0;
    if (q.j > 0 && q.s->restart != 0) {
        // The first interval to start in [lo, lo + sub_bytes): after a
        // marker 0xFF 0xD0-0xD7 (entropy-coded data has 0xFF only before
        // 0x00). None: no state to guess; the record waits for its
        // predecessor's end (a round's or the check's), ok = 0 till then.
        unsigned int o = 0;
        for (unsigned int i = lo < 2 ? 0 : lo - 2; i + 2 < lo + p.sub_bytes && i + 1 < q.s->length;
             ++i)
            if (d[i] == 0xFF && d[i + 1] >= 0xD0 && d[i + 1] <= 0xD7) {
                o = i + 2;
                break;
            }
        if (o == 0) {
            from.pos = lo * 8;
            from.ok = 0;
            r.from = r.to = from;
            r.blocks = 0;
            for (int i = 0; i < 4; ++i) r.dc[i] = 0;
            return;
        }
        from.pos = o * 8;
    } else if (q.j > 0) {
        // Not the second byte of a stuffed 0xFF: that 0 is no data.
        unsigned int o = lo;
        if (d[o - 1] == 0xFF && d[o] == 0) o += 1;
        from.pos = o * 8;
    }
    r.from = from;
    gf_split_run<false>(*q.ch, *q.s, (const GfHuff*)p.tables, q.m, from, q.stop, q.total, r);
}

// Step 2, round `round` (0 first): records of buffer round % 2 to those
// of the other buffer.
extern "C" __global__ void gf_split_round(GfSplit p, unsigned int round) {
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    GfSub q;
    if (!gf_split_sub(p, t, q)) return;
    const GfSync* in = (const GfSync*)p.sync + (size_t)(round & 1) * p.n_subs;
    GfSync* out = (GfSync*)p.sync + (size_t)((round + 1) & 1) * p.n_subs;
    out[t] = in[t];
    if (q.j == 0 || !in[t - 1].to.ok || gf_at_eq(in[t].from, in[t - 1].to, q.m)) return;
    out[t].from = in[t - 1].to;
    gf_split_run<false>(*q.ch, *q.s, (const GfHuff*)p.tables, q.m, out[t].from, q.stop,
                        q.total, out[t]);
}

// Whether every block of the split scan is in its component's grid, as
// gf_scan finds them (else it stops at the first that is not, with
// GF_SCAN_BAD_DESC, whatever the bits say).
__device__ __forceinline__ bool gf_split_grid_ok(const GfSub& q) {
    const GfChain& ch = *q.ch;
    const GfScan& s = *q.s;
    if (s.comps == 1) {
        const GfCoefs& c = ch.comp[s.comp[0]];
        return c.bw <= c.stride && c.bh <= c.rows;
    }
    for (int i = 0; i < s.comps; ++i) {
        const GfCoefs& c = ch.comp[s.comp[i]];
        if ((unsigned long long)ch.mcus_x * c.h > c.stride ||
            (unsigned long long)ch.mcus_y * c.v > c.rows)
            return false;
    }
    return true;
}

// The true decode faulted in subsequence t of [t, end) (its base
// written). In a block of the scan, that fault is the chain's status, the
// one gf_scan would report (the same bits decoded from the same state,
// blocks in the same order, every one in its grid). Past the scan's last
// block (junk before the marker), the scan is decoded: the subsequences
// after t start past its blocks, and gf_split_write makes them write
// nothing. Before session 49 one thread decoded such a chain again, only
// to name the fault or to stop where the scan ends: a truncated megapixel
// photo held its batch for hundreds of ms.
__device__ __forceinline__ void gf_split_fault(const GfSub& q, GfSync* r, unsigned int t,
                                               unsigned int end, unsigned int* status) {
    const GfSync& f = r[t];
    // A faulted symbol leaves k past the DC: its block is the last begun.
    // A restart marker's fault (k = 0) comes before the next block, as
    // gf_scan meets it before that block's MCU (and only if there is one).
    const unsigned int begun = f.base + f.blocks;
    if (f.to.ok || f.to.fault == GF_SCAN_OK) return;
    if (f.to.k == 0 ? q.s->restart == 0 : begun == 0) return;
    const unsigned int g = f.to.k == 0 ? begun : begun - 1;
    if (g < q.total) {
        if (gf_split_grid_ok(q)) *status = f.to.fault;
        return;
    }
    if (q.total == 0xFFFFFFFFu) return;
    for (unsigned int u = t + 1; u < end; ++u) r[u].base = q.total + 1;
    *status = GF_SCAN_SPLIT;
}

// Step 3, one thread per chain: its subsequences (buffer rounds % 2)
// chained up, those out of step decoded again from their predecessor's
// end; if they cover the scan, their bases, and status GF_SCAN_SPLIT;
// where the true decode faults in a block of the scan, that fault.
extern "C" __global__ void gf_split_check(GfSplit p) {
    const unsigned int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= p.n) return;
    const unsigned int* first = (const unsigned int*)p.sub_first;
    if (first[c + 1] <= first[c] || first[c + 1] > p.n_subs) return;
    GfSub q;
    if (!gf_split_sub(p, first[c], q) || q.ch != (const GfChain*)p.chains + c) return;
    GfSync* r = (GfSync*)p.sync + (size_t)(p.rounds & 1) * p.n_subs;
    unsigned int* status = (unsigned int*)p.status + c;
    const unsigned int subs = first[c + 1] - first[c];
    unsigned int base = 0, dc[4] = {0, 0, 0, 0};
    for (unsigned int t = first[c]; t < first[c + 1]; ++t) {
        if (t > first[c] && !gf_at_eq(r[t].from, r[t - 1].to, q.m)) {
            if (!r[t - 1].to.ok) {
                gf_split_fault(q, r, t - 1, first[c + 1], status);
                return;
            }
            r[t].from = r[t - 1].to;
            gf_split_run<false>(*q.ch, *q.s, (const GfHuff*)p.tables, q.m, r[t].from,
                                gf_split_stop(p, t - first[c], subs), q.total, r[t]);
        }
        r[t].base = base;
        for (int i = 0; i < 4; ++i) r[t].dc_base[i] = (int)dc[i];
        base += r[t].blocks;
        // With restart markers every record starts an interval, DC 0.
        if (q.m.phaseless)
            for (unsigned int j = 0; j < q.m.n; ++j)
                dc[q.m.comp[(r[t].base + j) % q.m.n]] += (unsigned int)r[t].dc[j];
        else if (q.s->restart == 0)
            for (int i = 0; i < 4; ++i) dc[i] += (unsigned int)r[t].dc[i];
    }
    // Short of the scan: the last subsequence, which runs on past the
    // segment's end, faulted in a block of it.
    if (base < q.total) {
        gf_split_fault(q, r, first[c + 1] - 1, first[c + 1], status);
        return;
    }
    *status = GF_SCAN_SPLIT;
}

// Step 4, one thread per subsequence of a chain step 3 marked.
extern "C" __global__ void gf_split_write(GfSplit p) {
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    GfSub q;
    if (!gf_split_sub(p, t, q)) return;
    unsigned int* status = (unsigned int*)p.status + (q.ch - (const GfChain*)p.chains);
    if (*status != GF_SCAN_SPLIT) return;
    GfSync r = ((const GfSync*)p.sync)[(size_t)(p.rounds & 1) * p.n_subs + t];
    // Past the scan's last block (gf_split_fault): nothing of the scan.
    if (r.base > q.total) return;
    // The block this record starts in: the one begun last before it, or
    // the next (where m.phaseless, r.from.u may be a guess's).
    if (q.m.phaseless)
        r.from.u = (unsigned char)((r.base + (r.from.k != 0 ? q.m.n - 1 : 0)) % q.m.n);
    const unsigned int fault = gf_split_run<true>(*q.ch, *q.s, (const GfHuff*)p.tables, q.m,
                                                  r.from, q.stop, q.total, r);
    if (fault != GF_SCAN_OK) *status = fault;
}
