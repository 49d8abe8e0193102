//! Walking a WebDataset shard's tar headers into an [`Index`] (issue 18),
//! whole or damaged.
//!
//! A local shard is walked as a file (member data is seeked past), a shard
//! in object storage as the stream its download is (member data is read
//! through); both walks find the same members in the same bytes. A walk
//! keeps what it found before any damage, and a header damaged in the
//! middle of a shard (a flipped bit, a block overwritten) does not end it:
//! like GNU tar ("skipping to next header"), the walk reads on, block by
//! block, to the next block that is a valid `ustar` header, and goes on
//! from there. Only the members whose headers lay in the damage are lost.
//! The same holds for a header zeroed out, which reads as the end of the
//! archive: a walk that ends reads the rest of the shard, and a header
//! there is damage read past, not bytes to drop without a word.

use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use super::index::{Entry, Index, Label, key_and_extension};

/// Tar archives are written in blocks of this many bytes.
pub(crate) const BLOCK: u64 = 512;

/// A stretch of a shard the walk read past without a valid header.
#[derive(Debug)]
struct Skip {
    /// Where, what was wrong there, and what it cost.
    note: String,
    /// How many members the walk had found before it.
    before: usize,
}

/// What a walk of a tar archive's headers found.
pub(crate) struct Walk {
    /// The file members, in archive order.
    pub(crate) entries: Vec<Entry>,
    /// Where the last member's data ends, padded to the tar's 512-byte
    /// blocks: the next header's offset.
    end: u64,
    /// What stopped the walk before the archive's end, if anything.
    pub(crate) error: Option<io::Error>,
    /// The damage the walk read past, in shard order.
    skips: Vec<Skip>,
    /// `error` is the reader's own (I/O), not the tar's.
    read_failed: bool,
    /// The archive's end (its first zero block) and the first byte after
    /// it that is not zero: writers pad an archive with zeros, so a byte
    /// that is not zero there is what is left of members whose headers
    /// were lost.
    stray: Option<(u64, u64)>,
}

/// Walk a local shard (or any bytes that seek), seeking past member data;
/// gives the reader back.
pub(crate) fn walk_file<R: Read + Seek>(reader: R) -> (Walk, R) {
    walk_with(reader, |walk, bytes, base| {
        walk.segment(tar::Archive::new(bytes).entries_with_seek(), base)
    })
}

/// Walk a shard as a stream (a download), reading through member data;
/// gives the reader back.
pub(crate) fn walk_stream<R: Read>(reader: R) -> (Walk, R) {
    walk_with(reader, |walk, bytes, base| {
        walk.segment(tar::Archive::new(bytes).entries(), base)
    })
}

/// Index a local shard by seeking past member data.
pub(crate) fn scan_file(path: &Path) -> io::Result<Index> {
    let file = std::fs::File::open(path)?;
    let shard_bytes = file.metadata()?.len();
    Ok(walk_file(file).0.index(shard_bytes))
}

/// The walk: one tar segment after another, each begun at the next valid
/// header after the damage that ended the last. `segment` walks the tar
/// archive that starts at the reader's position, `base` bytes into the
/// shard, and returns the error that ended it, if any.
fn walk_with<R: Read>(
    reader: R,
    mut segment: impl FnMut(&mut Walk, &mut Tracked<R>, u64) -> Option<io::Error>,
) -> (Walk, R) {
    let mut bytes = Tracked {
        inner: reader,
        pos: 0,
        base: 0,
        back: Vec::new(),
        at: 0,
        failed: false,
        stray: None,
    };
    let mut walk = Walk {
        entries: Vec::new(),
        end: 0,
        error: None,
        skips: Vec::new(),
        read_failed: false,
        stray: None,
    };
    loop {
        let base = bytes.pos;
        bytes.base = base;
        let Some(e) = segment(&mut walk, &mut bytes, base) else {
            // The tar ended at a zero block (the tar crate, like Python's
            // `tarfile`, ends an archive at the first) or at the end of the
            // bytes. A zero block with tar headers after it is damage:
            // bytes zeroed where a header was (a crash before the data
            // reached the disk, a hole left by a parallel download), or
            // archives joined with `cat` instead of `tar -A`. The walk reads
            // the rest of the shard (after a whole tar: its end blocks and
            // padding) and goes on from the next header, as `tar -i` does.
            let zero = bytes.pos.saturating_sub(BLOCK);
            match bytes.next_header() {
                Ok(Some(next)) => {
                    walk.skips.push(Skip {
                        note: format!(
                            "a zero block at byte {}, which ends a tar archive, with a tar \
                             header after it at byte {next}: the members whose headers lay \
                             between, if any, are lost",
                            zero
                        ),
                        before: walk.entries.len(),
                    });
                    walk.end = next;
                    continue;
                }
                Ok(None) => {
                    walk.stray = bytes.stray.map(|at| (zero, at));
                    break;
                }
                Err(e) => {
                    (walk.error, walk.read_failed) = (Some(e), true);
                    break;
                }
            }
        };
        // Read on only past a header that failed: a read that failed is
        // the download's (walked again whole: `remote::listing`), and a
        // walk stopped inside a member's data (a shard cut short, a size
        // past any seek) cannot know where the next header is.
        if bytes.failed || bytes.pos < walk.end.saturating_add(BLOCK) {
            (walk.error, walk.read_failed) = (Some(e), bytes.failed);
            break;
        }
        match bytes.next_header() {
            Ok(Some(next)) => {
                walk.skips.push(Skip {
                    note: format!(
                        "a damaged tar header at byte {}: {}; the members up to the next \
                         header, at byte {next}, are lost",
                        walk.end,
                        plain(&e)
                    ),
                    before: walk.entries.len(),
                });
                walk.end = next;
            }
            Ok(None) => {
                walk.error = Some(e);
                break;
            }
            Err(read) => {
                (walk.error, walk.read_failed) = (Some(read), true);
                break;
            }
        }
    }
    (walk, bytes.inner)
}

impl Walk {
    /// Walk one tar archive's entries (`Archive::entries`: a stream;
    /// `entries_with_seek`: a file), `base` bytes into the shard; only
    /// `cls` members' data is read.
    fn segment<R: Read>(
        &mut self,
        entries: io::Result<tar::Entries<'_, R>>,
        base: u64,
    ) -> Option<io::Error> {
        let entries = match entries {
            Ok(e) => e,
            Err(e) => return Some(e),
        };
        for entry in entries {
            if let Err(e) = entry.and_then(|e| self.add(e, base)) {
                return Some(e);
            }
        }
        None
    }

    fn add<R: Read>(&mut self, mut entry: tar::Entry<'_, R>, base: u64) -> io::Result<()> {
        let (offset, len) = (base.saturating_add(entry.raw_file_position()), entry.size());
        // `entry_size` is the bytes stored in the archive (a sparse file's
        // differ from its size).
        let stored = entry.header().entry_size().unwrap_or(len);
        self.end = offset.saturating_add(stored.div_ceil(BLOCK).saturating_mul(BLOCK));
        if !entry.header().entry_type().is_file() {
            return Ok(());
        }
        let name = entry.path()?.to_string_lossy().into_owned();
        let label = if key_and_extension(&name).1.eq_ignore_ascii_case("cls") {
            let mut text = String::new();
            let ok = entry.by_ref().take(64).read_to_string(&mut text).is_ok();
            match text.trim().parse() {
                Ok(l) if ok => Label::Value(l),
                _ => Label::Bad,
            }
        } else {
            Label::None
        };
        self.entries.push(Entry {
            name,
            offset,
            len,
            label,
        });
        Ok(())
    }

    /// The index of a shard of `shard_bytes` that this walk went over to
    /// its end (every byte was read or seeked past; a stream that failed
    /// is walked again instead). `damage` names each damaged header the
    /// walk read past, and how the shard ends if it is cut short: by a
    /// crash or a full disk while it was written or copied, the shard
    /// keeps its members before the cut. The cut falls
    /// * inside a header: the walk failed there;
    /// * inside a member's data: that member reaches past the end (its
    ///   sample fails when read; `Listing::add`);
    /// * at a block: no end-of-archive block follows the last member.
    ///   Every tar writer ends an archive with zero blocks (POSIX.1-1988
    ///   `ustar`: two of them; GNU tar, Python's `tarfile`, the `tar`
    ///   crate, Go's `archive/tar`), and the walk stops at the first, so a
    ///   shard without one was cut at a member's edge, where buffered
    ///   writers' cuts fall.
    ///
    /// A header that fails with no valid header after it, although bytes
    /// follow, is damage, not a cut; so are bytes that are not zero after
    /// the archive's end.
    pub(crate) fn index(self, shard_bytes: u64) -> Index {
        let past = |e: &Entry| e.offset.saturating_add(e.len) > shard_bytes;
        let next_header = self.end.saturating_add(BLOCK);
        let end = match (&self.error, self.entries.iter().find(|e| past(e))) {
            (_, Some(e)) => Some(format!(
                "cut short: the shard ends at byte {shard_bytes}, inside member {}",
                e.name
            )),
            // A stream's walk fails reading past the last member's padding,
            // a file's walk finds no header there: the same cut.
            _ if shard_bytes <= self.end => Some(format!(
                "cut short: the shard ends at byte {shard_bytes}, after a member, without \
                 the tar's end-of-archive blocks"
            )),
            _ if shard_bytes < next_header => Some(format!(
                "cut short: the shard ends at byte {shard_bytes}, inside a tar header"
            )),
            (Some(e), None) if self.read_failed => Some(format!(
                "the shard could not be read on from the tar header at byte {}: {e}",
                self.end
            )),
            (Some(e), None) => Some(format!("a damaged tar header at byte {}: {e}", self.end)),
            (None, None) => self.stray.map(|(zero, at)| {
                format!(
                    "a zero block at byte {zero} ends the tar, but bytes that are not zero \
                     follow it from byte {at} (a header zeroed, or bytes left from an earlier \
                     file)"
                )
            }),
        };
        let mut notes: Vec<String> = self.skips.iter().take(3).map(|s| s.note.clone()).collect();
        if self.skips.len() > 3 {
            notes.push(format!("{} more damaged headers", self.skips.len() - 3));
        }
        let mut borders: Vec<usize> = self.skips.iter().map(|s| s.before).collect();
        if let Some(end) = end {
            notes.push(format!("{end}; members after it are lost"));
            borders.push(self.entries.len());
        }
        Index {
            shard_bytes,
            entries: self.entries,
            damage: (!notes.is_empty()).then(|| notes.join("; ")),
            borders,
        }
    }
}

/// An error's words fit for a message: the tar crate quotes a damaged
/// header's fields, which may be any bytes.
fn plain(e: &io::Error) -> String {
    const MOST: usize = 120;
    let mut s: String = e
        .to_string()
        .chars()
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c
            } else {
                '?'
            }
        })
        .take(MOST + 1)
        .collect();
    if s.len() > MOST {
        s.truncate(MOST);
        s.push_str("...");
    }
    s
}

/// A shard's bytes as the walk reads them: where it is (so that a walk
/// stopped by a damaged header can go on at the next one), and the bytes
/// it read ahead looking for that header, given back before the rest.
struct Tracked<R> {
    inner: R,
    /// Bytes into the shard.
    pos: u64,
    /// Where the current tar segment began: the tar crate's positions
    /// (and the seek results it keeps) count from there.
    base: u64,
    /// Read ahead and given back: `back[at..]` comes before `inner`.
    back: Vec<u8>,
    at: usize,
    /// `inner` itself failed (not the tar inside it).
    failed: bool,
    /// Set by `next_header`.
    stray: Option<u64>,
}

impl<R: Read> Read for Tracked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = if self.at < self.back.len() {
            let n = buf.len().min(self.back.len() - self.at);
            buf[..n].copy_from_slice(&self.back[self.at..self.at + n]);
            self.at += n;
            n
        } else {
            self.inner.read(buf).inspect_err(|e| {
                self.failed |= e.kind() != io::ErrorKind::Interrupted;
            })?
        };
        self.pos += n as u64;
        Ok(n)
    }
}

impl<R: Read + Seek> Seek for Tracked<R> {
    /// Only moves relative to the position (the tar crate skips member
    /// data with `SeekFrom::Current`); returns the position in the current
    /// segment.
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let SeekFrom::Current(by) = to else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a shard walk seeks only from where it is",
            ));
        };
        let ahead = self.back.len() - self.at;
        let pos = self
            .pos
            .checked_add_signed(by)
            .filter(|p| *p >= self.base)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek out of range"))?;
        match usize::try_from(by) {
            Ok(by) if by <= ahead => self.at += by,
            _ => {
                // `inner` is `ahead` bytes past `pos`.
                let ahead = i64::try_from(ahead).unwrap_or(i64::MAX);
                self.inner
                    .seek(SeekFrom::Current(by.saturating_sub(ahead)))?;
                self.back.clear();
                self.at = 0;
            }
        }
        self.pos = pos;
        Ok(pos - self.base)
    }
}

impl<R: Read> Tracked<R> {
    /// Read on from the next block boundary to the next block that is a
    /// valid `ustar` or GNU tar header, give it back unread, and return
    /// its offset; `None` at the end of the bytes (a part block is no
    /// header), with `stray` set to the first byte read that is not zero,
    /// if any. Reads 64 KiB at a time: a file seeked past its members so
    /// far is read through only after damage or past the archive's end.
    fn next_header(&mut self) -> io::Result<Option<u64>> {
        let mut buf = vec![0u8; 64 << 10];
        self.stray = None;
        let align = (self.pos.next_multiple_of(BLOCK) - self.pos) as usize;
        let n = self.fill(&mut buf[..align])?;
        self.note_stray(&buf[..n]);
        if n < align {
            return Ok(None);
        }
        loop {
            let n = self.fill(&mut buf)?;
            for start in (0..n - n % BLOCK as usize).step_by(BLOCK as usize) {
                if is_header(&buf[start..start + BLOCK as usize]) {
                    let mut back = buf[start..n].to_vec();
                    back.extend_from_slice(&self.back[self.at..]);
                    self.pos -= (n - start) as u64;
                    (self.back, self.at) = (back, 0);
                    return Ok(Some(self.pos));
                }
            }
            self.note_stray(&buf[..n]);
            if n < buf.len() {
                return Ok(None);
            }
        }
    }

    /// Remember the first byte that is not zero in `read`, the bytes just
    /// read (they end at `pos`).
    fn note_stray(&mut self, read: &[u8]) {
        if self.stray.is_none()
            && let Some(i) = read.iter().position(|&b| b != 0)
        {
            self.stray = Some(self.pos - (read.len() - i) as u64);
        }
    }

    /// Read until `buf` is full or the bytes end; how many were read.
    fn fill(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            match self.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }
}

/// Whether a block is a tar header the walk may go on from: `ustar`
/// (POSIX.1-1988) or GNU magic, and a checksum that matches (the sum of
/// its bytes with the checksum field read as spaces, as the tar crate and
/// GNU tar check it). Old V7 headers, which have no magic, are not looked
/// for: 8 bytes of magic and a checksum make a member's data read as a
/// header only where the data is itself a tar archive.
fn is_header(block: &[u8]) -> bool {
    let header = tar::Header::from_byte_slice(block);
    let sum = block[..148]
        .iter()
        .chain(&block[156..])
        .map(|&b| u32::from(b))
        .sum::<u32>()
        + 8 * u32::from(b' ');
    (header.as_ustar().is_some() || header.as_gnu().is_some()) && header.cksum().ok() == Some(sum)
}

/// Whether `block`, the 512 bytes before member `e`'s data, is `e`'s own
/// tar header: a valid one, of a file of `e`'s size and name. A name too
/// long for the header is checked by its start, which GNU and PAX writers
/// (the tar crate, Python's `tarfile`) put there beside the whole name;
/// a name they had to alter (not UTF-8, not ASCII for `tarfile`) fails
/// the check, and the shard is walked instead.
pub(crate) fn heads(block: &[u8], e: &Entry) -> bool {
    if block.len() != BLOCK as usize || !is_header(block) {
        return false;
    }
    let h = tar::Header::from_byte_slice(block);
    let (name, full) = (h.path_bytes(), e.name.as_bytes());
    let named = *name == *full || (full.len() > 100 && name.len() >= 97 && full.starts_with(&name));
    h.entry_type().is_file() && h.entry_size().ok() == Some(e.len) && named
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard() -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, body) in [
            ("a.jpg", &[7u8; 700][..]),
            ("a.cls", b"123"),
            ("b.jpg", &[9u8; 512][..]),
            ("b.cls", b"4"),
            ("c.jpg", &[3u8; 70_000][..]),
            ("c.cls", b"5"),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_size(body.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, name, body).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn walk(data: &[u8], seek: bool) -> Index {
        let w = if seek {
            walk_file(io::Cursor::new(data)).0
        } else {
            walk_stream(data).0
        };
        w.index(data.len() as u64)
    }

    /// A shard cut at every length indexes the same whether walked as a
    /// file (seeking past member data: local shards) or as a stream
    /// (reading through it: a download from object storage), and a cut
    /// anywhere before the end-of-archive blocks is damage.
    #[test]
    fn a_cut_shard_walks_the_same_as_a_file_and_as_a_stream() {
        let whole = shard();
        let full = walk(&whole, true);
        assert_eq!((full.damage.as_deref(), &full.borders[..]), (None, &[][..]));
        assert_eq!(full.entries[1].label, Label::Value(123));
        let archive_end = full.entries[5].offset + BLOCK;
        for cut in 0..whole.len() {
            let data = &whole[..cut];
            let (file, stream) = (walk(data, true), walk(data, false));
            assert_eq!(file, stream, "cut at {cut}");
            let damaged = (cut as u64) < archive_end + BLOCK;
            assert_eq!(file.damage.is_some(), damaged);
            if damaged {
                assert_eq!(file.borders, [file.entries.len()], "cut at {cut}");
            }
            for e in &file.entries {
                if e.offset + e.len > cut as u64 {
                    assert!(file.damage.as_deref().unwrap().contains(&e.name));
                }
            }
        }
    }

    /// Walks `data` as a file and as a stream, asserts that both lost
    /// member `i` of the whole shard's index `full` and nothing else, and
    /// returns what the damage note says.
    fn lost_only(data: &[u8], full: &Index, i: usize) -> String {
        let (file, stream) = (walk(data, true), walk(data, false));
        assert_eq!(file, stream, "member {i}");
        let mut expect = full.entries.clone();
        expect.remove(i);
        assert_eq!(file.entries, expect, "member {i}");
        assert_eq!(file.borders, [i], "member {i}");
        file.damage.unwrap()
    }

    /// A header damaged anywhere in its 512 bytes loses that member only:
    /// the walk goes on at the next header, as a file and as a stream,
    /// and names where the damage was and where it went on.
    #[test]
    fn a_damaged_header_loses_only_its_member() {
        let whole = shard();
        let full = walk(&whole, true);
        for (i, e) in full.entries.iter().enumerate() {
            let header = e.offset - BLOCK;
            for byte in [0, 100, 148, 257, 511] {
                let mut data = whole.clone();
                data[(header + byte) as usize] ^= 0x21;
                let why = lost_only(&data, &full, i);
                assert!(why.contains(&format!("header at byte {header}:")), "{why}");
                let next = full.entries.get(i + 1).map(|n| n.offset - BLOCK);
                if let Some(next) = next {
                    assert!(
                        why.contains(&format!("next header, at byte {next}")),
                        "{why}"
                    );
                }
            }
        }
    }

    /// Damage over several headers and blocks of data: every member whose
    /// header lies outside it is found, and a part block at the end of the
    /// bytes is no header.
    #[test]
    fn damage_over_several_members_loses_only_theirs() {
        let whole = shard();
        let full = walk(&whole, true);
        let (from, to) = (full.entries[1].offset - BLOCK, full.entries[4].offset);
        let mut data = whole.clone();
        data[from as usize..to as usize].fill(0x5a);
        let (file, stream) = (walk(&data, true), walk(&data, false));
        assert_eq!(file, stream);
        let names: Vec<&str> = file.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a.jpg", "c.cls"]);
        assert_eq!(file.borders, [1]);
        // The end-of-archive blocks overwritten: the walk reads to the
        // end and finds no more headers there.
        let mut data = whole.clone();
        let eoa = (full.entries[5].offset + BLOCK) as usize;
        data[eoa..].fill(0x5a);
        data.truncate(data.len() - 100);
        let (file, stream) = (walk(&data, true), walk(&data, false));
        assert_eq!(file, stream);
        assert_eq!(file.entries, full.entries);
        assert_eq!(file.borders, [6]);
        assert!(file.damage.unwrap().contains("members after it are lost"));
    }

    /// A header zeroed out reads as the tar's end: the walk reads on, finds
    /// the next header, and loses only the zeroed member; the last member
    /// zeroed leaves its data after the end, which is damage too. Whole
    /// members zeroed are read past the same way.
    #[test]
    fn a_zeroed_header_loses_only_its_member() {
        let whole = shard();
        let full = walk(&whole, true);
        for (i, e) in full.entries.iter().enumerate() {
            let header = (e.offset - BLOCK) as usize;
            let mut data = whole.clone();
            data[header..header + BLOCK as usize].fill(0);
            let why = lost_only(&data, &full, i);
            assert!(
                why.contains(&format!("zero block at byte {header}")),
                "{why}"
            );
            match full.entries.get(i + 1) {
                Some(n) => assert!(
                    why.contains(&format!("header after it at byte {}", n.offset - BLOCK)),
                    "{why}"
                ),
                None => assert!(why.contains(&format!("from byte {}", e.offset)), "{why}"),
            }
        }
        // b.jpg and b.cls zeroed whole, headers and data.
        let (from, to) = (
            full.entries[2].offset - BLOCK,
            full.entries[4].offset - BLOCK,
        );
        let mut data = whole.clone();
        data[from as usize..to as usize].fill(0);
        let (file, stream) = (walk(&data, true), walk(&data, false));
        assert_eq!(file, stream);
        let names: Vec<&str> = file.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a.jpg", "a.cls", "c.jpg", "c.cls"]);
        assert_eq!(file.borders, [2]);
    }

    /// What may follow a whole tar: padding to a record (Python's
    /// `tarfile` and GNU tar pad to 10 KiB) is no damage; a second archive
    /// joined with `cat` is read on and reported; bytes left from an
    /// earlier, longer file are reported.
    #[test]
    fn what_follows_the_end_of_the_archive() {
        let whole = shard();
        let full = walk(&whole, true);
        let mut padded = whole.clone();
        padded.resize(whole.len().next_multiple_of(10240) + 10240, 0);
        let (file, stream) = (walk(&padded, true), walk(&padded, false));
        assert_eq!(file, stream);
        assert_eq!((&file.entries, file.damage), (&full.entries, None));

        let joined = [&whole[..], &whole[..]].concat();
        let (file, stream) = (walk(&joined, true), walk(&joined, false));
        assert_eq!(file, stream);
        assert_eq!(file.entries.len(), 12);
        assert_eq!(
            file.entries[6].offset,
            full.entries[0].offset + whole.len() as u64
        );
        assert_eq!(file.borders, [6]);
        assert!(file.damage.unwrap().contains("if any, are lost"));

        let mut stale = whole.clone();
        let eoa = (full.entries[5].offset + BLOCK) as usize;
        stale[eoa + 700] = b'x';
        let (file, stream) = (walk(&stale, true), walk(&stale, false));
        assert_eq!(file, stream);
        assert_eq!(file.entries, full.entries);
        assert_eq!(file.borders, [6]);
        let why = file.damage.unwrap();
        assert!(
            why.contains(&format!("zero block at byte {eoa} ends the tar"))
                && why.contains(&format!("from byte {}", eoa + 700)),
            "{why}"
        );
    }

    /// A member's own header confirms it; another member's, a header of
    /// another size, or a block that is no header does not. A name too
    /// long for the header is confirmed by the start the header keeps.
    #[test]
    fn a_member_is_confirmed_by_its_own_header_only() {
        let whole = shard();
        let full = walk(&whole, true);
        let block = |e: &Entry| &whole[(e.offset - BLOCK) as usize..e.offset as usize];
        for (i, e) in full.entries.iter().enumerate() {
            for (j, other) in full.entries.iter().enumerate() {
                assert_eq!(heads(block(other), e), i == j, "{i} {j}");
            }
            let mut longer = e.clone();
            longer.len += 1;
            assert!(!heads(block(e), &longer));
        }
        assert!(!heads(&whole[..100], &full.entries[0]));
        let long = format!("{}/{}.jpg", "d".repeat(90), "k".repeat(80));
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(3);
        h.set_mode(0o644);
        b.append_data(&mut h, &long, &b"abc"[..]).unwrap();
        let data = b.into_inner().unwrap();
        let ix = walk(&data, true);
        let e = &ix.entries[0];
        assert_eq!(e.name, long);
        assert!(heads(
            &data[(e.offset - BLOCK) as usize..e.offset as usize],
            e
        ));
        let mut other = e.clone();
        other.name.push('x');
        other.name.remove(0);
        assert!(!heads(
            &data[(e.offset - BLOCK) as usize..e.offset as usize],
            &other
        ));
    }
}
