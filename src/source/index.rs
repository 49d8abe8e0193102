//! A WebDataset shard's index: its file members' names, byte ranges and
//! labels, read once from the tar headers (issue 18, item 2).
//!
//! Random access to a shard needs each member's offset; reading them means
//! walking every 512-byte header, which for a local file is a seek per
//! member and for a shard in object storage is a download of the whole
//! shard. The index keeps the walk's result in a small text file
//! (`SHARD.idx` beside the shard, written by `gpufeed index` and `gpufeed
//! pack`, or in a cache folder when built on first open):
//!
//! ```text
//! gpufeed-wds-index 2 SHARD_BYTES MEMBERS
//! OFFSET<TAB>LEN<TAB>NAME<TAB>LABEL
//! ```
//!
//! one line per file member in shard order, each ending in LF. `NAME`
//! escapes `%`, tab, CR and LF as `%25`, `%09`, `%0D`, `%0A`; `LABEL` is
//! the `cls` member's value, `!` for a `cls` member that is not a
//! non-negative integer, `-` for other members. An index whose
//! `SHARD_BYTES` differs from the shard's size is stale and ignored.
//!
//! An index file cut short (a crash or a full disk while it was written)
//! is ignored too, and the shard walked: the header's `MEMBERS` must count
//! the lines, and the last line must end. Version 1 had no count, so a
//! file cut at a line's end read as a shard with fewer members (its
//! samples lost without a word), and one cut inside a label as another
//! label; version 1 files are ignored, and `gpufeed index` rewrites them.

use std::path::Path;

use super::{LeftOut, Member, Sample};

/// Image members, by extension.
pub(crate) const IMAGE_EXTENSIONS: &[&str] = &["jpg", "jpeg", "png", "webp"];

const MAGIC: &str = "gpufeed-wds-index 2";

/// A `cls` member's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Label {
    /// Not a `cls` member.
    None,
    /// A non-negative integer.
    Value(u32),
    /// A `cls` member whose text is not one.
    Bad,
}

/// One file member of a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) name: String,
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) label: Label,
}

/// A shard's file members, and its size when the index was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Index {
    pub(crate) shard_bytes: u64,
    pub(crate) entries: Vec<Entry>,
    /// Why a walk found the shard cut short or damaged (its members after
    /// that point are unknown); `None` for a whole shard and for every
    /// parsed index, since a damaged shard's index is never written.
    pub(crate) damage: Option<String>,
    /// Where the damage lies among the members: before `entries[i]` for
    /// each `i`, after the last member for `entries.len()`; empty for a
    /// whole shard. A key whose members border the damage may have lost
    /// some there (`Listing::add`).
    pub(crate) borders: Vec<usize>,
}

/// The index file's path for a local shard: `SHARD.idx`.
pub(crate) fn beside(shard: &Path) -> std::path::PathBuf {
    let mut s = shard.as_os_str().to_owned();
    s.push(".idx");
    s.into()
}

fn escape(name: &str) -> String {
    let mut s = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' => s.push_str("%25"),
            '\t' => s.push_str("%09"),
            '\r' => s.push_str("%0D"),
            '\n' => s.push_str("%0A"),
            c => s.push(c),
        }
    }
    s
}

fn unescape(name: &str) -> String {
    name.replace("%09", "\t")
        .replace("%0D", "\r")
        .replace("%0A", "\n")
        .replace("%25", "%")
}

impl Index {
    /// The index file's text.
    pub(crate) fn to_text(&self) -> String {
        let mut s = format!("{MAGIC} {} {}\n", self.shard_bytes, self.entries.len());
        for e in &self.entries {
            let label = match e.label {
                Label::None => "-".to_string(),
                Label::Bad => "!".to_string(),
                Label::Value(v) => v.to_string(),
            };
            s += &format!("{}\t{}\t{}\t{label}\n", e.offset, e.len, escape(&e.name));
        }
        s
    }

    /// The text of the index file `gpufeed index` writes beside `shard`;
    /// an error naming the shard when its walk found damage, since an
    /// index would hide the damage from every later open.
    pub(crate) fn file_text(&self, shard: &Path) -> crate::error::Result<String> {
        match &self.damage {
            Some(why) => Err(crate::error::Error::Dataset {
                path: shard.to_path_buf(),
                msg: format!("not indexed: {why}"),
            }),
            None => Ok(self.to_text()),
        }
    }

    /// Parse an index file; `None` when it is not one (another version,
    /// a damaged line, a file cut short). A damaged index is rebuilt,
    /// never trusted.
    pub(crate) fn parse(text: &str) -> Option<Index> {
        if !text.ends_with('\n') {
            return None;
        }
        let mut lines = text.lines();
        let mut head = lines.next()?.strip_prefix(MAGIC)?.split(' ');
        let (Some(""), Some(shard_bytes), Some(members), None) =
            (head.next(), head.next(), head.next(), head.next())
        else {
            return None;
        };
        let (shard_bytes, members) = (shard_bytes.parse().ok()?, members.parse::<usize>().ok()?);
        // Not reserved from `members`: a damaged count must not allocate.
        let mut entries = Vec::new();
        for line in lines {
            let mut f = line.split('\t');
            let (offset, len, name, label) = (f.next()?, f.next()?, f.next()?, f.next()?);
            if f.next().is_some() {
                return None;
            }
            let label = match label {
                "-" => Label::None,
                "!" => Label::Bad,
                v => Label::Value(v.parse().ok()?),
            };
            entries.push(Entry {
                name: unescape(name),
                offset: offset.parse().ok()?,
                len: len.parse().ok()?,
                label,
            });
        }
        (entries.len() == members).then_some(Index {
            shard_bytes,
            entries,
            damage: None,
            borders: Vec::new(),
        })
    }

    /// The members by which an index read from a file is checked against
    /// its shard before it is used (`walk::heads`): the first, the middle
    /// and the last. Fitting the shard's size is not enough: a shard
    /// written again with the same members in another order (packed
    /// again, shuffled) has the same size, since a tar's size does not
    /// depend on the order, and its old index would read other members'
    /// bytes under its own labels.
    pub(crate) fn probes(&self) -> Vec<&Entry> {
        let n = self.entries.len();
        let mut at = vec![0, n / 2, n.saturating_sub(1)];
        at.dedup();
        at.into_iter().filter_map(|i| self.entries.get(i)).collect()
    }

    /// Whether every member lies inside a shard of `shard_bytes`.
    pub(crate) fn fits(&self, shard_bytes: u64) -> bool {
        self.shard_bytes == shard_bytes
            && self.entries.iter().all(|e| {
                e.offset
                    .checked_add(e.len)
                    .is_some_and(|end| end <= shard_bytes)
            })
    }
}

/// Split a member path into (key, extension): the key is everything up to
/// the first dot of the file name.
pub(crate) fn key_and_extension(path: &str) -> (&str, &str) {
    let name_start = path.rfind('/').map_or(0, |i| i + 1);
    match path[name_start..].find('.') {
        Some(dot) => (&path[..name_start + dot], &path[name_start + dot + 1..]),
        None => (path, ""),
    }
}

/// A sample's defects found at listing.
const TWO_IMAGES: &str = "two image members share this key";
const BAD_LABEL: &str = "the cls member is not a non-negative integer";
const NO_LABEL: &str = "no cls member (label) for this key";
const CUT: &str = "the shard is cut short inside this key's members";
const LABEL_LOST: &str = "no cls member (label) for this key, whose members border where the shard is cut short or \
     damaged";

/// Whether a listing defect concerns the label only (labels given by
/// `Source::with_labels` replace it).
pub(crate) fn is_label_problem(p: &str) -> bool {
    p == BAD_LABEL || p == NO_LABEL || p == LABEL_LOST
}

/// One key's members while grouping.
#[derive(Default)]
struct Group {
    key: String,
    image: Option<(String, u64, u64)>,
    images: usize,
    label: Option<u32>,
    bad_label: bool,
    /// A member reaches past the shard's end: its bytes, or the label
    /// read from them, are not the sample's.
    cut: bool,
    /// The group's members border a shard's damage, where members of its
    /// key may have been lost. That alone fails no sample: one whose image
    /// and label members lie whole in the shard is good, whatever was
    /// lost beside it; it only names the likely cause of a missing label.
    borders: bool,
}

/// Where grouped samples go.
pub(crate) struct Listing<'a> {
    pub(crate) samples: &'a mut Vec<Sample>,
    pub(crate) members: &'a mut Vec<Member>,
    pub(crate) left_out: &'a mut LeftOut,
}

impl Listing<'_> {
    /// Group a shard's members by key (consecutive members sharing a key,
    /// WebDataset's convention) into samples named `SHARD/KEY.EXT`; a
    /// damaged shard is named in `left_out`.
    pub(crate) fn add(&mut self, ix: &Index, shard_index: u32, shard: &Path) {
        if let Some(why) = &ix.damage {
            self.left_out.damaged(shard, why);
        }
        let mut group = Group::default();
        for (i, e) in ix.entries.iter().enumerate() {
            let (key, ext) = key_and_extension(&e.name);
            let border = ix.borders.contains(&i);
            group.borders |= border;
            if key != group.key {
                let done = std::mem::take(&mut group);
                self.finish(done, shard_index, shard);
                group.key = key.to_string();
            }
            group.borders |= border;
            group.cut |= e.offset.saturating_add(e.len) > ix.shard_bytes;
            let ext = ext.to_ascii_lowercase();
            if IMAGE_EXTENSIONS.contains(&ext.as_str()) {
                group.images += 1;
                group.image = Some((ext, e.offset, e.len));
            } else {
                match e.label {
                    Label::Value(l) => group.label = Some(l),
                    Label::Bad => group.bad_label = true,
                    Label::None => {}
                }
            }
        }
        group.borders |= ix.borders.contains(&ix.entries.len());
        self.finish(group, shard_index, shard);
    }

    fn finish(&mut self, g: Group, shard_index: u32, shard: &Path) {
        if g.key.is_empty() {
            return;
        }
        let Some((ext, offset, len)) = g.image else {
            self.left_out.extension(&shard.join(&g.key));
            return;
        };
        let problem = if g.cut {
            Some(CUT)
        } else if g.images > 1 {
            Some(TWO_IMAGES)
        } else if g.bad_label {
            Some(BAD_LABEL)
        } else if g.label.is_none() {
            Some(if g.borders { LABEL_LOST } else { NO_LABEL })
        } else {
            None
        };
        self.samples.push(Sample {
            path: shard.join(format!("{}.{ext}", g.key)),
            label: g.label.unwrap_or(0),
        });
        self.members.push(Member {
            shard: shard_index,
            offset,
            len,
            problem,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_round_trip() {
        assert_eq!(
            key_and_extension("d/n01.x/abc.seg.png"),
            ("d/n01.x/abc", "seg.png")
        );
        assert_eq!(key_and_extension("abc"), ("abc", ""));
        let index = Index {
            shard_bytes: 10_240,
            entries: vec![
                Entry {
                    name: "a b/100%\tx\n.jpg".into(),
                    offset: 512,
                    len: 3000,
                    label: Label::None,
                },
                Entry {
                    name: "a b/100%\tx\n.cls".into(),
                    offset: 4096,
                    len: 2,
                    label: Label::Value(7),
                },
                Entry {
                    name: "k.cls".into(),
                    offset: 5120,
                    len: 3,
                    label: Label::Bad,
                },
            ],
            damage: None,
            borders: Vec::new(),
        };
        let text = index.to_text();
        assert_eq!(text.lines().count(), 4);
        assert_eq!(Index::parse(&text), Some(index.clone()));
        assert!(index.fits(10_240));
        assert!(!index.fits(10_241));
        // Damaged or foreign text is refused, never half-read.
        assert_eq!(Index::parse(&text.replace("3000", "x")), None);
        assert_eq!(Index::parse("gpufeed-wds-index 2 10\n"), None);
        assert_eq!(Index::parse("gpufeed-wds-index 2 10 0 1\n"), None);
        assert_eq!(Index::parse("gpufeed-wds-index 2  10 0\n"), None);
        assert_eq!(
            Index::parse("gpufeed-wds-index 2 10 0\n").map(|ix| ix.entries.len()),
            Some(0)
        );
        // Version 1 (no member count) is another version.
        assert_eq!(Index::parse("gpufeed-wds-index 1 10240\n"), None);
    }

    /// A file cut anywhere (a crash or a full disk while `gpufeed index`
    /// wrote it) is refused: no prefix of an index's text reads as an
    /// index with fewer members or another label.
    #[test]
    fn a_cut_index_is_refused_at_every_length() {
        let index = Index {
            shard_bytes: 1 << 20,
            entries: (0..40u32)
                .map(|i| Entry {
                    name: format!("s{i:03}.{}", if i % 2 == 0 { "jpg" } else { "cls" }),
                    offset: 512 + 1024 * u64::from(i),
                    len: 512,
                    label: if i % 2 == 0 {
                        Label::None
                    } else {
                        Label::Value(100 + i)
                    },
                })
                .collect(),
            damage: None,
            borders: Vec::new(),
        };
        let text = index.to_text();
        for cut in 0..text.len() {
            assert_eq!(
                Index::parse(&text[..cut]),
                None,
                "cut at {cut} of {}",
                text.len()
            );
        }
        assert_eq!(Index::parse(&text), Some(index));
    }
}
