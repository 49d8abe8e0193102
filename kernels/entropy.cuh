// The entropy decoder's procedures (T.81 F.2.2, G.1.2), one block at a
// time, shared by the scan decoder and the split kernels (progressive.cu),
// which follow them with their own scheduling. Split out of progressive.cu
// so that each file stays readable; the procedures follow libjpeg's
// jdphuff.c and jdhuff.c (progressive.cu's opening comment says how
// closely, and where they stop instead of warning).
//
// Include after scan.cuh, whose descriptors these read: NVRTC is given
// headers pasted in place (src/cuda/mod.rs), so a header includes no other.
#pragma once

// Zigzag index -> natural (row-major) index, with 16 entries past the end
// for run lengths that overshoot the band, as libjpeg's jpeg_natural_order.
static __constant__ const unsigned char gf_natural[80] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,
    12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28,
    35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
    58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
    63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
};

// The bit reader of one segment: byte stuffing removed (0xFF 0x00 is 0xFF),
// stopped at the first marker; past it, zero bits, and consuming any of
// them is an overrun (libjpeg inserts the same zeros, with a warning).
struct GfBits {
    const unsigned char* p;
    unsigned int pos, len;
    unsigned long long buf;  // the low `n` bits are unread, oldest highest
    int n;
    int zeros;               // how many of the `n` are past the segment
    unsigned int mask;       // bit i: the i-th newest byte in `buf` was stuffed (2 bytes read)
    unsigned int status;
};

__device__ __forceinline__ void gf_fill(GfBits& b) {
    while (b.n <= 56) {
        unsigned int byte = 0, stuffed = 0;
        if (b.zeros == 0 && b.pos < b.len) {
            const unsigned int v = b.p[b.pos];
            if (v != 0xFF) {
                byte = v;
                b.pos += 1;
            } else if (b.pos + 1 < b.len && b.p[b.pos + 1] == 0) {
                byte = 0xFF;
                b.pos += 2;
                stuffed = 1;
            } else {
                b.zeros += 8;  // a marker: pos stays on its 0xFF
            }
        } else {
            b.zeros += 8;
        }
        b.buf = (b.buf << 8) | byte;
        b.mask = (b.mask << 1) | stuffed;
        b.n += 8;
    }
}

// A reader of scan `s`'s segment from its byte `pos` on.
__device__ __forceinline__ GfBits gf_reader(const GfChain& ch, const GfScan& s, unsigned int pos) {
    GfBits b;
    b.p = (const unsigned char*)ch.data + s.offset;
    b.pos = pos;
    b.len = s.length;
    b.buf = 0;
    b.n = 0;
    b.zeros = 0;
    b.mask = 0;
    b.status = GF_SCAN_OK;
    return b;
}

// The next k bits (k <= 16), not consumed.
__device__ __forceinline__ unsigned int gf_peek(GfBits& b, int k) {
    if (b.n < k) gf_fill(b);
    return (unsigned int)(b.buf >> (b.n - k)) & ((1u << k) - 1u);
}

__device__ __forceinline__ void gf_skip(GfBits& b, int k) {
    b.n -= k;
    if (b.n < b.zeros && b.status == GF_SCAN_OK) b.status = GF_SCAN_OVERRUN;
}

__device__ __forceinline__ unsigned int gf_bits(GfBits& b, int k) {
    if (k == 0) return 0;
    const unsigned int v = gf_peek(b, k);
    gf_skip(b, k);
    return v;
}

// T.81 F.2.2.1 EXTEND: the s-bit value v as a signed magnitude.
__device__ __forceinline__ int gf_extend(unsigned int v, int s) {
    return s == 0 ? 0 : ((int)v < (1 << (s - 1)) ? (int)v - (1 << s) + 1 : (int)v);
}

// T.81 F.2.2.3 DECODE, with a 9-bit lookahead first (libjpeg's jdhuff.c).
__device__ __forceinline__ int gf_huff(GfBits& b, const GfHuff& t) {
    const unsigned int e = t.look[gf_peek(b, 9)];
    if (e != 0) {
        gf_skip(b, (int)(e >> 8));
        return (int)(e & 0xFF);
    }
    const unsigned int code = gf_peek(b, 16);
    for (int l = 10; l <= 16; ++l) {
        const int c = (int)(code >> (16 - l));
        if (c <= t.maxcode[l]) {
            gf_skip(b, l);
            return t.symbols[(c + t.valoff[l]) & 0xFF];
        }
    }
    if (b.status == GF_SCAN_OK) b.status = GF_SCAN_BAD_CODE;
    return 0;
}

// A restart marker ends each interval (T.81 F.1.2.3): what is left of the
// interval's last byte is padding; the marker must come next, after any
// fill bytes, numbered in turn.
__device__ __forceinline__ void gf_restart(GfBits& b, unsigned int number) {
    if (b.n - b.zeros >= 8) {
        b.status = GF_SCAN_BAD_RESTART;
        return;
    }
    while (b.pos + 1 < b.len && b.p[b.pos] == 0xFF && b.p[b.pos + 1] == 0xFF) b.pos += 1;
    if (b.pos + 1 < b.len && b.p[b.pos] == 0xFF && b.p[b.pos + 1] == 0xD0 + (number & 7)) {
        b.pos += 2;
        b.buf = 0;
        b.n = 0;
        b.zeros = 0;
        b.mask = 0;
    } else {
        b.status = GF_SCAN_BAD_RESTART;
    }
}

// Decoder state that restarts reset (T.81 G.1.2.1, G.1.2.2).
struct GfScanState {
    int pred[4];             // DC predictions, per scan component
    unsigned int eobrun;     // blocks left in the current end-of-band run
};

// G.1.2.1: the DC difference, shifted by the point transform.
__device__ __forceinline__ void gf_dc_first(GfBits& b, const GfHuff& t, GfScanState& st,
                                            int ci, int al, short* blk) {
    const int s = gf_huff(b, t);
    const long long dc = (long long)st.pred[ci] + gf_extend(gf_bits(b, s), s);
    if (dc > 2147483647LL || dc < -2147483647LL - 1) {
        // libjpeg refuses the file (JERR_BAD_DCT_COEF); a sum that cannot
        // be an int is no DC value.
        if (b.status == GF_SCAN_OK) b.status = GF_SCAN_BAD_SYMBOL;
        return;
    }
    st.pred[ci] = (int)dc;
    blk[0] = (short)(int)((unsigned int)st.pred[ci] << al);
}

// G.1.2.1: one more bit of the DC coefficient.
__device__ __forceinline__ void gf_dc_refine(GfBits& b, int al, short* blk) {
    if (gf_bits(b, 1)) blk[0] = (short)(blk[0] | (1 << al));
}

// G.1.2.2: a band's first bits, with end-of-band runs across blocks.
__device__ __forceinline__ void gf_ac_first(GfBits& b, const GfHuff& t, GfScanState& st,
                                            int ss, int se, int al, short* blk) {
    if (st.eobrun > 0) {
        st.eobrun -= 1;
        return;
    }
    for (int k = ss; k <= se; ++k) {
        const int rs = gf_huff(b, t);
        int r = rs >> 4;
        const int s = rs & 15;
        if (s != 0) {
            k += r;
            const int v = gf_extend(gf_bits(b, s), s);
            blk[gf_natural[k]] = (short)(int)((unsigned int)v << al);
        } else if (r == 15) {
            k += 15;
        } else {
            st.eobrun = 1u << r;
            if (r != 0) st.eobrun += gf_bits(b, r);
            st.eobrun -= 1;
            break;
        }
        if (b.status != GF_SCAN_OK) return;
    }
}

// F.2.2.1, F.2.2.2: a whole block of a sequential scan, as libjpeg-turbo's
// jdhuff.c decodes it: the DC prediction adds as unsigned (a run of extreme
// differences wraps there rather than failing), and a zero-size symbol
// other than ZRL ends the block whatever its run.
__device__ __forceinline__ void gf_seq_block(GfBits& b, const GfHuff& dct, const GfHuff& act,
                                             GfScanState& st, int ci, short* blk) {
    const int s = gf_huff(b, dct);
    const int diff = gf_extend(gf_bits(b, s), s);
    st.pred[ci] = (int)((unsigned int)st.pred[ci] + (unsigned int)diff);
    blk[0] = (short)st.pred[ci];
    for (int k = 1; k < 64; ++k) {
        const int rs = gf_huff(b, act);
        const int r = rs >> 4, z = rs & 15;
        if (z != 0) {
            k += r;
            blk[gf_natural[k]] = (short)gf_extend(gf_bits(b, z), z);
        } else if (r == 15) {
            k += 15;
        } else {
            break;
        }
        if (b.status != GF_SCAN_OK) return;
    }
}

// One correction bit for a coefficient already nonzero (G.1.2.3).
__device__ __forceinline__ void gf_correct(GfBits& b, short* c, int p1) {
    if (gf_bits(b, 1) && (*c & p1) == 0) *c = (short)(*c >= 0 ? *c + p1 : *c - p1);
}

// G.1.2.3: a band's next bit: correction bits for coefficients already
// nonzero, new coefficients of magnitude 1 among the zero ones.
__device__ __forceinline__ void gf_ac_refine(GfBits& b, const GfHuff& t, GfScanState& st,
                                             int ss, int se, int al, short* blk) {
    const int p1 = 1 << al;
    int k = ss;
    if (st.eobrun == 0) {
        for (; k <= se; ++k) {
            const int rs = gf_huff(b, t);
            int r = rs >> 4;
            int s = rs & 15;
            if (s != 0) {
                if (s != 1 && b.status == GF_SCAN_OK) b.status = GF_SCAN_BAD_SYMBOL;
                s = gf_bits(b, 1) ? p1 : -p1;
            } else if (r != 15) {
                st.eobrun = 1u << r;
                if (r != 0) st.eobrun += gf_bits(b, r);
                break;
            }
            do {
                short* c = blk + gf_natural[k];
                if (*c != 0) {
                    gf_correct(b, c, p1);
                } else if (--r < 0) {
                    break;
                }
                k += 1;
            } while (k <= se);
            if (s != 0) blk[gf_natural[k]] = (short)s;
            if (b.status != GF_SCAN_OK) return;
        }
    }
    if (st.eobrun > 0) {
        for (; k <= se; ++k) {
            short* c = blk + gf_natural[k];
            if (*c != 0) gf_correct(b, c, p1);
        }
        st.eobrun -= 1;
    }
}

// Block (bx, by) of a component, or null outside its grid.
__device__ __forceinline__ short* gf_block(const GfCoefs& c, unsigned int bx, unsigned int by) {
    if (bx >= c.stride || by >= c.rows) return 0;
    return (short*)c.coef + ((size_t)by * c.stride + bx) * 64;
}

__device__ __forceinline__ void gf_block_decode(GfBits& b, const GfScan& s, const GfHuff* tables,
                                                GfScanState& st, int i, short* blk) {
    if (s.se == 63 && s.ss == 0) {
        gf_seq_block(b, tables[s.dc[i]], tables[s.ac[i]], st, i, blk);
    } else if (s.ss == 0) {
        if (s.ah == 0) gf_dc_first(b, tables[s.dc[i]], st, i, s.al, blk);
        else gf_dc_refine(b, s.al, blk);
    } else {
        if (s.ah == 0) gf_ac_first(b, tables[s.ac[0]], st, s.ss, s.se, s.al, blk);
        else gf_ac_refine(b, tables[s.ac[0]], st, s.ss, s.se, s.al, blk);
    }
}

// Whether the scan's descriptor is one the procedures above are safe on
// (the host makes no other; checked again so that no read or write can
// leave its buffer whatever the host sent).
__device__ __forceinline__ bool gf_scan_ok(const GfChain& ch, const GfScan& s, unsigned int n_tables) {
    if (s.offset > ch.data_len || s.length > ch.data_len - s.offset) return false;
    if (s.comps == 0 || s.comps > 4 || s.al > 13) return false;
    const bool seq = s.ss == 0 && s.se == 63;
    if (seq ? (s.ah != 0 || s.al != 0)
            : (s.ss == 0 ? s.se != 0 : (s.se < s.ss || s.se > 63 || s.comps != 1)))
        return false;
    for (int i = 0; i < s.comps; ++i) {
        if (s.comp[i] >= ch.comps) return false;
        if (s.ss == 0 && s.ah == 0 && s.dc[i] >= n_tables) return false;
        if ((s.ss != 0 || seq) && s.ac[i] >= n_tables) return false;
    }
    return true;
}
