// Descriptors shared by the host (src/cuda/desc.rs, #[repr(C)]) and the
// progressive-scan decoder (progressive.cu). Field order, sizes and offsets
// are checked on both sides; change them together.
#pragma once

// One Huffman table, folded by the host as libjpeg's derived tables
// (src/jpeg/scans.rs; T.81 Annex C and F.2.2.3).
struct GfHuff {
    unsigned short look[512];  // next 9 bits -> (code length << 8) | symbol; 0: longer code
    int maxcode[18];           // largest code of length l (1..16), -1 if none; [17] ends the search
    int valoff[18];            // symbol index = code + valoff[l]
    unsigned char symbols[256];
};

// One scan of one image (T.81 B.2.3, G.1.1.1): its entropy-coded segment
// and what it codes.
struct GfScan {
    unsigned int offset;       // first byte of the entropy-coded segment in the image's bytes
    unsigned int length;       // bytes up to the marker that ends the scan
    unsigned int restart;      // restart interval in MCUs; 0: none
    unsigned short dc[4];      // DC table (index into the launch's tables) per scan component
    unsigned short ac[4];      // AC table per scan component
    unsigned char comps;       // components in the scan, 1..4
    unsigned char comp[4];     // frame component index of each
    unsigned char ss, se, ah, al;  // spectral band and successive approximation
    unsigned char pad[3];
};

// One component's DCT coefficients: int16 blocks of 64 in natural order,
// row-major over the grid padded to whole MCUs.
struct GfCoefs {
    unsigned long long coef;   // device pointer
    unsigned int stride;       // blocks per grid row (MCUs across * h)
    unsigned int rows;         // grid rows (MCUs down * v)
    unsigned int bw, bh;       // blocks a non-interleaved scan covers
    unsigned char h, v;        // sampling factors
    unsigned char pad[6];
};

// One thread's work: scans that touch coefficients no other chain touches,
// decoded in file order (all DC scans of an image; or all AC scans of one
// component; or all scans of a sequential image).
struct GfChain {
    unsigned long long data;   // device pointer: the image's bytes
    unsigned int data_len;
    unsigned int first_scan;   // index into the launch's scans
    unsigned int scans;
    unsigned int mcus_x, mcus_y;  // MCUs of an interleaved scan
    unsigned int comps;        // components in the frame
    GfCoefs comp[4];
};

// A split sequential scan's decoder state at a symbol boundary: the bit
// where the symbol starts (in the segment's bytes, stuffing included), the
// block within the MCU and the coefficient next (0: the DC).
struct GfAt {
    unsigned int pos;
    unsigned char u, k;
    unsigned char ok;          // 0: no such state (the decode before it faulted)
    unsigned char fault;       // where ok is 0, the GF_SCAN_* code of that fault
};

// One subsequence of a split scan (progressive.cu, "Split decoding"):
// decoded from `from` up to `to`, `blocks` blocks begun on the way, the DC
// differences summed per scan component; `base` and `dc_base` are what
// the subsequences before it add up to (gf_split_check writes them).
struct GfSync {
    GfAt from, to;
    unsigned int blocks, base;
    int dc[4], dc_base[4];
};

// One split launch: the gf_progressive launch's lists, the subsequences
// of each chain (chain c owns [sub_first[c], sub_first[c + 1]); none: not
// split), 2 * n_subs GfSync records, and the rounds of gf_split_round.
struct GfSplit {
    unsigned long long chains, scans, tables, sub_first, sync, status;  // device pointers
    unsigned int n, n_scans, n_tables, n_subs;
    unsigned int sub_bytes;    // bytes of a subsequence
    unsigned int rounds;
};

// NVRTC has no offsetof without headers; the sizes below equal the sums of
// the member sizes, so there is no padding and every offset follows
// (comp at 32 in GfChain), as desc.rs asserts.
static_assert(sizeof(GfHuff) == 1424, "GfHuff layout changed: update src/cuda/desc.rs");
static_assert(sizeof(GfScan) == 40, "GfScan layout changed: update src/cuda/desc.rs");
static_assert(sizeof(GfCoefs) == 32, "GfCoefs layout changed: update src/cuda/desc.rs");
static_assert(sizeof(GfChain) == 160, "GfChain layout changed: update src/cuda/desc.rs");
static_assert(sizeof(GfChain) == 8 + 6 * 4 + 4 * sizeof(GfCoefs), "GfChain has padding");
static_assert(sizeof(GfAt) == 8, "GfAt layout changed: update src/cuda/jpeg_desc.rs");
static_assert(sizeof(GfSync) == 56, "GfSync layout changed: update src/cuda/jpeg_desc.rs");
static_assert(sizeof(GfSplit) == 72, "GfSplit layout changed: update src/cuda/jpeg_desc.rs");

// Status per chain (progressive.cu writes one): 0 decoded; otherwise the
// first fault met, and the image goes to another decoder.
#define GF_SCAN_OK 0
#define GF_SCAN_BAD_CODE 1      // no Huffman code of 16 bits or fewer matches
#define GF_SCAN_OVERRUN 2       // the scan needs bits past its segment (a marker or the end)
#define GF_SCAN_BAD_RESTART 3   // the restart marker is missing or out of order
#define GF_SCAN_BAD_SYMBOL 4    // a refinement symbol of magnitude other than 1, or a DC sum past an int
#define GF_SCAN_BAD_DESC 5      // a descriptor out of range (the host's fault)
// Not a result: gf_split_check's mark that the split kernels decode the
// chain, which gf_progressive turns into GF_SCAN_OK.
#define GF_SCAN_SPLIT 0x5350

// gf_progressive's warps per chain at most (src/cuda/progressive.rs,
// SCAN_WARPS_MAX; src/cuda/jpeg_desc.rs checks they agree): a chain of at most this many scans
// that all code the same components decodes them at once, one warp each
// (progressive.cu, "Scans in a pipeline").
#define GF_SCAN_WARPS_MAX 16
