//! WebDataset shards on the local file system (issue 18, first part): the
//! same samples, labels and pixels as the folder they were packed from,
//! for the same seed; sharding across ranks; defects named by shard and
//! key under `OnError`.

mod common;

use std::path::{Path, PathBuf};

use common::Outcome;
use common::shards::{builder, same_batches};

common::tests!(
    shards_give_the_folder_s_samples_labels_and_pixels,
    imagenet_size_photos_round_trip,
    shards_split_across_ranks_like_the_folder,
    defects_are_named_by_shard_and_key,
    a_missing_shard_is_an_error_naming_it,
    webp_and_png_members_are_images,
    streaming_gives_each_rank_its_shards_through_the_buffer,
    labels_from_a_function_replace_missing_cls_members,
    a_cut_index_file_loses_no_sample,
    a_cut_shard_keeps_the_samples_before_the_cut,
    a_damaged_header_loses_only_its_sample,
    a_zeroed_page_loses_only_its_samples,
    an_index_of_a_shard_packed_again_is_not_trusted,
);

use gpufeed::{Error, Pipeline, Source, sampler::ShardMode};

/// Shards of `source` written as `gpufeed pack` writes them: `KEY.jpg` and
/// `KEY.cls` per sample, a new shard every `per_shard` samples.
fn pack(source: &Source, dir: &Path, per_shard: usize) -> Vec<PathBuf> {
    let mut shards = Vec::new();
    for (n, chunk) in source.samples().chunks(per_shard).enumerate() {
        let path = dir.join(format!("shard-{n:06}.tar"));
        let mut b = tar::Builder::new(std::fs::File::create(&path).unwrap());
        for (i, s) in chunk.iter().enumerate() {
            let key = format!("{:09}", n * per_shard + i);
            let data = std::fs::read(&s.path).unwrap();
            let label = s.label.to_string();
            append(&mut b, &format!("{key}.jpg"), &data);
            append(&mut b, &format!("{key}.cls"), label.as_bytes());
        }
        b.into_inner().unwrap();
        shards.push(path);
    }
    shards
}

/// [`pack`] with 8 samples a shard, and `SHARD.idx` beside each, as
/// `gpufeed pack` leaves them.
fn pack_and_index(source: &Source, dir: &Path) -> Vec<PathBuf> {
    let shards = pack(source, dir, 8);
    let names = shards.iter().map(|p| p.to_str().unwrap());
    gpufeed::source::index_shards(names, &Default::default()).unwrap();
    shards
}

/// One tar member, as `gpufeed pack` writes it.
fn append(b: &mut tar::Builder<std::fs::File>, name: &str, body: &[u8]) {
    let mut h = tar::Header::new_gnu();
    h.set_size(body.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, name, body).unwrap();
}

fn shards_give_the_folder_s_samples_labels_and_pixels() {
    let folder = Source::image_folder(common::sample_dir()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shards = pack(&folder, dir.path(), 8);
    assert_eq!(shards.len(), 4);
    let pattern = dir.path().join("shard-{000000..000003}.tar");
    let wds = Source::webdataset([pattern.to_str().unwrap()]).unwrap();
    assert!(
        wds.samples()[9]
            .path
            .ends_with("shard-000001.tar/000000009.jpg")
    );
    same_batches(folder, wds);
}

/// The corpus's 169 ImageNet-size photos (4:2:0 and 4:4:4, a few
/// progressive) through shards of 50.
fn imagenet_size_photos_round_trip() -> Outcome {
    let corpus = common::corpus()?;
    let folder = Source::recursive(corpus.join("photos/imagenet-size")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shards = pack(&folder, dir.path(), 50);
    assert_eq!(shards.len(), folder.len().div_ceil(50));
    let names: Vec<String> = shards.iter().map(|p| p.display().to_string()).collect();
    same_batches(folder, Source::webdataset(&names).unwrap());
    Ok(())
}

/// Index files cut short (a crash or a full disk while `gpufeed index`
/// wrote them) are walked past, not trusted: one cut at a line's end
/// (before index format 2, read as a shard of fewer samples), one without
/// its last line's end (as a cut inside a label of two digits would be,
/// which format 1 read as another label).
fn a_cut_index_file_loses_no_sample() {
    let folder = Source::image_folder(common::sample_dir()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shards = pack(&folder, dir.path(), 8);
    let done = gpufeed::source::index_shards(
        shards.iter().map(|p| p.to_str().unwrap()),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(done.iter().map(|d| d.1).sum::<usize>(), 2 * folder.len());
    let idx = |n: usize| PathBuf::from(format!("{}.idx", shards[n].display()));
    let text = std::fs::read_to_string(idx(0)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    std::fs::write(idx(0), lines[..lines.len() - 4].join("\n") + "\n").unwrap();
    let text = std::fs::read_to_string(idx(1)).unwrap();
    std::fs::write(idx(1), &text[..text.len() - 1]).unwrap();
    let wds = Source::webdataset(shards.iter().map(|p| p.to_str().unwrap())).unwrap();
    same_batches(folder, wds);
}

/// Each member of a shard as the tar crate walks it: (name, data offset,
/// data length).
fn members(shard: &Path) -> Vec<(String, u64, u64)> {
    let mut a = tar::Archive::new(std::fs::File::open(shard).unwrap());
    a.entries()
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.path().unwrap().display().to_string();
            (name, e.raw_file_position(), e.size())
        })
        .collect()
}

/// A shard cut short (a `gpufeed pack`, a copy or a download killed, a
/// full disk) at every kind of place: inside a header, at a header's
/// start (where buffered writers' cuts fall), inside an image's or a
/// label's data, inside the end-of-archive blocks. The other shards and
/// the cut one's whole samples before the cut are listed with their
/// bytes; a sample with a member cut through or lost past the cut fails
/// when read, named, and is never read as whole (before, a cut inside a
/// header lost every shard and a cut inside a label could read as another
/// label); the shard is named in `left_out`, as are the lost members after
/// the cut. Its stale
/// index is ignored, and `gpufeed index` refuses to index it.
fn a_cut_shard_keeps_the_samples_before_the_cut() {
    let folder = Source::image_folder(common::sample_dir()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shards = pack_and_index(&folder, dir.path());
    let names: Vec<&str> = shards.iter().map(|p| p.to_str().unwrap()).collect();
    let whole = std::fs::read(&shards[1]).unwrap();
    let layout = members(&shards[1]);
    let last_end = layout
        .last()
        .map(|m| (m.1 + m.2).div_ceil(512) * 512)
        .unwrap();
    let mut cuts = vec![0, 100, last_end, last_end + 512, whole.len() as u64 - 1];
    for (_, offset, len) in &layout {
        cuts.extend([offset - 512, offset - 512 + 100, offset + len / 2]);
    }
    let mut failed_reads = 0;
    for cut in cuts {
        std::fs::write(&shards[1], &whole[..cut as usize]).unwrap();
        let s = Source::webdataset(&names).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        let damaged = &s.left_out().damaged_shards;
        // One zero block ends an archive for every reader (the tar crate,
        // GNU tar): a cut after it loses nothing.
        if cut >= last_end + 512 {
            assert!(damaged.is_empty(), "cut at {cut}: {damaged:?}");
        } else {
            assert_eq!(damaged.len(), 1, "cut at {cut}: {damaged:?}");
            assert_eq!(damaged[0].0, shards[1]);
            assert!(damaged[0].1.contains("cut short"), "{damaged:?}");
            assert!(
                s.left_out()
                    .to_string()
                    .contains("shard-000001.tar: cut short")
            );
        }
        // Every sample of the folder in another shard, or whose image and
        // label members lie whole before the cut, is listed with its bytes
        // and label; one whose image's header lies before the cut but
        // another member does not is listed and fails, named; those after
        // the cut are not listed.
        let mut listed = std::collections::HashMap::new();
        for (i, sample) in s.samples().iter().enumerate() {
            listed.insert(sample.path.clone(), i);
        }
        let member = |name: String| layout.iter().find(|m| m.0 == name).unwrap();
        let mut buf = Vec::new();
        for (n, f) in folder.samples().iter().enumerate() {
            let key = PathBuf::from(format!("shard-{:06}.tar/{n:09}.jpg", n / 8));
            let (in_cut, image, label) = if n / 8 == 1 {
                (
                    true,
                    member(format!("{n:09}.jpg")),
                    member(format!("{n:09}.cls")),
                )
            } else {
                (false, &layout[0], &layout[0])
            };
            let Some(&i) = listed.get(&dir.path().join(&key)) else {
                assert!(in_cut && cut < image.1, "cut at {cut}: {key:?}");
                continue;
            };
            assert!(!in_cut || image.1 <= cut, "cut at {cut}: {key:?}");
            match s.read(i, &mut buf, u64::MAX) {
                Ok(()) => {
                    assert!(!in_cut || label.1 + label.2 <= cut, "cut at {cut}: {key:?}");
                    assert_eq!(
                        buf,
                        std::fs::read(&f.path).unwrap(),
                        "cut at {cut}: {key:?}"
                    );
                    assert_eq!(s.samples()[i].label, f.label, "cut at {cut}: {key:?}");
                }
                Err(e) => {
                    assert!(e.to_string().contains("cut short"), "cut at {cut}: {e}");
                    assert!(in_cut && label.1 + label.2 > cut, "cut at {cut}: {key:?}");
                    failed_reads += 1;
                }
            }
        }
        let e = gpufeed::source::index_shards(&names[1..2], &Default::default());
        if damaged.is_empty() {
            e.unwrap();
        } else {
            let e = e.unwrap_err().to_string();
            assert!(
                e.contains("shard-000001.tar") && e.contains("cut short"),
                "{e}"
            );
        }
    }
    assert!(
        failed_reads > 2 * 8,
        "a cut in each image and each label, at least"
    );

    // Through the pipeline, under the default `OnError::Skip`: the cut
    // sample is named among the skipped, the others delivered.
    let (image, _) = layout.iter().map(|m| (m.1, m.2)).nth(6).unwrap();
    std::fs::write(&shards[1], &whole[..(image + 10) as usize]).unwrap();
    let mut p = builder(Source::webdataset(&names).unwrap())
        .build()
        .unwrap();
    let batches: Vec<_> = p.epoch(0).map(Result::unwrap).collect();
    let delivered: usize = batches.iter().map(|b| b.keys().len()).sum();
    let skipped: Vec<String> = batches
        .iter()
        .flat_map(|b| b.skipped().iter().map(Error::to_string))
        .collect();
    assert_eq!(
        delivered,
        folder.len() - 5,
        "3 whole samples of 8 in the cut shard"
    );
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(
        skipped[0].contains("shard-000001.tar/000000011.jpg") && skipped[0].contains("cut short"),
        "{skipped:?}"
    );
}

/// Headers damaged in the middle of a shard of full length (a bad
/// checksum, a block overwritten) lose only the members whose headers
/// they are: the walk goes on at the next valid header, as GNU tar does,
/// so every other sample is listed and read whole with its label, and the
/// shard is named with where and why.
fn a_damaged_header_loses_only_its_sample() {
    let folder = Source::image_folder(common::sample_dir()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shards = pack(&folder, dir.path(), 8);
    let layout = members(&shards[0]);
    // Sample 2's image header, and sample 5's label header with a block
    // of its image's data.
    let (image, label) = (layout[4].1 - 512, layout[11].1 - 512);
    let mut bytes = std::fs::read(&shards[0]).unwrap();
    bytes[image as usize] ^= 0x55;
    bytes[label as usize - 512..label as usize + 512].fill(0xa5);
    std::fs::write(&shards[0], &bytes).unwrap();
    let s = Source::webdataset(shards.iter().map(|p| p.to_str().unwrap())).unwrap();
    let damaged = &s.left_out().damaged_shards;
    assert_eq!(damaged.len(), 1);
    assert_eq!(damaged[0].0, shards[0]);
    let why = &damaged[0].1;
    assert!(
        why.starts_with(&format!(
            "a damaged tar header at byte {image}: archive header checksum mismatch; the \
             members up to the next header, at byte {}, are lost; ",
            layout[5].1 - 512
        )),
        "{why}"
    );
    // The tar crate quotes the overwritten header's fields: only their
    // plain characters, and not all of them, reach the message.
    let (at, next) = (format!("header at byte {label}: "), layout[12].1 - 512);
    let second = &why[why.find(&at).expect(why)..];
    assert!(
        second.ends_with(&format!(
            "; the members up to the next header, at byte {next}, are lost"
        )),
        "{why}"
    );
    assert!(second.len() < 250 && second.is_ascii(), "{why}");
    assert_eq!(s.len(), folder.len() - 1, "sample 2 lost");
    let mut buf = Vec::new();
    for (n, f) in folder.samples().iter().enumerate() {
        let key = dir
            .path()
            .join(format!("shard-{:06}.tar/{n:09}.jpg", n / 8));
        let Some(i) = s.samples().iter().position(|x| x.path == key) else {
            assert_eq!(n, 2);
            continue;
        };
        match s.read(i, &mut buf, u64::MAX) {
            Ok(()) => {
                assert_eq!(buf, std::fs::read(&f.path).unwrap(), "{key:?}");
                assert_eq!(s.samples()[i].label, f.label, "{key:?}");
            }
            // Its image is whole, its label lost in the damage.
            Err(e) => assert!(
                n == 5 && e.to_string().contains("no cls member (label)"),
                "{key:?}: {e}"
            ),
        }
    }
}

/// A shard packed again with the same samples in another order has the
/// same size (a tar's size does not depend on the order), so its old
/// `SHARD.idx` fitted it, and before, every sample read another's bytes
/// under its own label. Now the index's first, middle and last members
/// are checked against their tar headers, and the shard is walked.
fn an_index_of_a_shard_packed_again_is_not_trusted() {
    let folder = Source::image_folder(common::sample_dir()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shards = pack_and_index(&folder, dir.path());
    let names: Vec<&str> = shards.iter().map(|p| p.to_str().unwrap()).collect();
    let before = std::fs::metadata(&shards[0]).unwrap().len();
    let mut b = tar::Builder::new(std::fs::File::create(&shards[0]).unwrap());
    for n in (0..8).rev() {
        let s = &folder.samples()[n];
        append(
            &mut b,
            &format!("{n:09}.jpg"),
            &std::fs::read(&s.path).unwrap(),
        );
        append(
            &mut b,
            &format!("{n:09}.cls"),
            s.label.to_string().as_bytes(),
        );
    }
    b.into_inner().unwrap();
    assert_eq!(std::fs::metadata(&shards[0]).unwrap().len(), before);
    let wds = Source::webdataset(&names).unwrap();
    assert_eq!(wds.len(), folder.len());
    let mut buf = Vec::new();
    for (i, s) in wds.samples().iter().enumerate() {
        let n: usize = s
            .path
            .file_stem()
            .unwrap()
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let f = &folder.samples()[n];
        wds.read(i, &mut buf, u64::MAX).unwrap();
        assert!(buf == std::fs::read(&f.path).unwrap(), "{:?}", s.path);
        assert_eq!(s.label, f.label, "{:?}", s.path);
    }
}

/// A 4 KiB page of a shard zeroed (what a crash leaves where data had not
/// reached the disk, or a parallel download's hole): a zero block reads as
/// the tar's end, and before, every sample after it was left out without a
/// word. Now only the samples whose headers lay in the page are lost, the
/// shard is named, and every sample none of whose bytes were zeroed reads
/// back whole.
fn a_zeroed_page_loses_only_its_samples() {
    let folder = Source::image_folder(common::sample_dir()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shards = pack(&folder, dir.path(), 8);
    let layout = members(&shards[0]);
    let page = (layout[6].1 - 512) / 4096 * 4096..(layout[6].1 - 512) / 4096 * 4096 + 4096;
    let mut bytes = std::fs::read(&shards[0]).unwrap();
    bytes[page.start as usize..page.end as usize].fill(0);
    std::fs::write(&shards[0], &bytes).unwrap();
    let s = Source::webdataset(shards.iter().map(|p| p.to_str().unwrap())).unwrap();
    let damaged = &s.left_out().damaged_shards;
    assert_eq!(damaged.len(), 1);
    assert_eq!(damaged[0].0, shards[0]);
    assert!(
        damaged[0].1.contains("which ends a tar archive"),
        "{damaged:?}"
    );
    // Member m (sample m / 2): its header and its data.
    let header = |m: usize| layout[m].1 - 512..layout[m].1;
    let data = |m: usize| layout[m].1..layout[m].1 + layout[m].2;
    let hit = |r: std::ops::Range<u64>| r.start < page.end && page.start < r.end;
    let lost: Vec<usize> = (0..layout.len()).filter(|&m| hit(header(m))).collect();
    assert!(lost.contains(&6));
    let mut buf = Vec::new();
    let mut read_whole = 0;
    for (n, f) in folder.samples().iter().enumerate() {
        let key = dir
            .path()
            .join(format!("shard-{:06}.tar/{n:09}.jpg", n / 8));
        let Some(i) = s.samples().iter().position(|x| x.path == key) else {
            assert!(n < 8 && lost.contains(&(2 * n)), "sample {n} left out");
            continue;
        };
        let touched = n < 8 && (2 * n..2 * n + 2).any(|m| hit(header(m)) || hit(data(m)));
        match s.read(i, &mut buf, u64::MAX) {
            Ok(()) if !touched => {
                assert_eq!(buf, std::fs::read(&f.path).unwrap(), "{key:?}");
                assert_eq!(s.samples()[i].label, f.label, "{key:?}");
                read_whole += 1;
            }
            // Zeroed data is not detectable in a tar (it has no data
            // checksums); the decoder meets it.
            Ok(()) => {}
            Err(e) => assert!(
                n < 8 && lost.contains(&(2 * n + 1)) && e.to_string().contains("no cls member"),
                "{key:?}: {e}"
            ),
        }
    }
    let touched = (0..8)
        .filter(|n| (2 * n..2 * n + 2).any(|m| hit(header(m)) || hit(data(m))))
        .count();
    assert_eq!(read_whole, folder.len() - touched);
}

fn shards_split_across_ranks_like_the_folder() {
    let folder = Source::image_folder(common::sample_dir()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shards = pack(&folder, dir.path(), 10);
    let names: Vec<String> = shards.iter().map(|p| p.display().to_string()).collect();
    let wds = Source::webdataset(&names).unwrap();
    for mode in [ShardMode::Uneven, ShardMode::Pad] {
        let mut seen = Vec::new();
        // 28 samples over 3 ranks: Pad repeats 2 to give each rank 10.
        for rank in 0..3 {
            let ranked = |s: Source| builder(s).shard(rank, 3).shard_mode(mode).build().unwrap();
            let mut a = ranked(folder.clone());
            let mut b = ranked(wds.clone());
            let ia: Vec<u32> = a
                .epoch(0)
                .flat_map(|x| x.unwrap().indices().to_vec())
                .collect();
            let ib: Vec<u32> = b
                .epoch(0)
                .flat_map(|x| x.unwrap().indices().to_vec())
                .collect();
            assert_eq!(ia, ib, "{mode:?} rank {rank}");
            seen.extend(ib);
        }
        seen.sort();
        let before = seen.len();
        seen.dedup();
        assert_eq!(seen.len(), 28, "{mode:?}: every sample");
        match mode {
            ShardMode::Uneven => assert_eq!(before, 28, "exactly once"),
            _ => assert_eq!(before, 30, "padded like DistributedSampler"),
        }
    }
}

fn defects_are_named_by_shard_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let shard = dir.path().join("bad.tar");
    let jpeg = std::fs::read(common::sample_dir().join("cat/cat-300572_1280.jpg")).unwrap();
    let mut b = tar::Builder::new(std::fs::File::create(&shard).unwrap());
    let members: Vec<(&str, &[u8])> = vec![
        ("good.jpg", &jpeg),
        ("good.cls", b"2"),
        ("nolabel.jpg", &jpeg),
        ("twice.jpg", &jpeg),
        ("twice.jpeg", &jpeg),
        ("twice.cls", b"1"),
        ("badlabel.jpg", &jpeg),
        ("badlabel.cls", b"cat"),
        ("noimage.cls", b"3"),
        ("junk.jpg", b"not a jpeg"),
        ("junk.cls", b"0"),
    ];
    for (name, body) in members {
        append(&mut b, name, body);
    }
    b.into_inner().unwrap();
    let s = Source::webdataset([shard.to_str().unwrap()]).unwrap();
    assert_eq!(s.len(), 5);
    assert_eq!(s.left_out().total(), 1, "the key without an image");
    let mut p = builder(s).build().unwrap();
    let batches: Vec<_> = p.epoch(0).map(Result::unwrap).collect();
    let delivered: Vec<String> = batches
        .iter()
        .flat_map(|b| b.keys().iter().map(|k| k.display().to_string()))
        .collect();
    assert_eq!(delivered.len(), 1);
    assert!(delivered[0].ends_with("bad.tar/good.jpg"));
    let errors: Vec<String> = batches
        .iter()
        .flat_map(|b| b.skipped().iter().map(Error::to_string))
        .collect();
    assert_eq!(errors.len(), 4, "{errors:?}");
    for (key, why) in [
        ("nolabel.jpg", "no cls member"),
        ("twice.jpeg", "two image members"),
        ("badlabel.jpg", "not a non-negative integer"),
        ("junk.jpg", "not a JPEG"),
    ] {
        assert!(
            errors
                .iter()
                .any(|e| e.contains(&format!("bad.tar/{key}")) && e.contains(why)),
            "{key}: {errors:?}"
        );
    }
}

fn a_missing_shard_is_an_error_naming_it() {
    let e = Source::webdataset(["/nonexistent/shard-{0..1}.tar"]).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/shard-0.tar"), "{e}");
}

/// One photo's pixels as a lossless WebP member and as a PNG member (the
/// same key, so the same crop): the two batches are equal byte for byte,
/// and not blank.
fn webp_and_png_members_are_images() {
    let jpeg = std::fs::read(common::sample_dir().join("cat/cat-300572_1280.jpg")).unwrap();
    let header = gpufeed::jpeg::parse_header(&jpeg, u64::MAX).unwrap();
    let mut img = gpufeed::decode::Image::default();
    gpufeed::decode::CpuDecoder::new(true)
        .decode(&jpeg, &header, &mut img)
        .unwrap();
    let mut png_bytes = Vec::new();
    {
        let mut e = png::Encoder::new(&mut png_bytes, img.width, img.height);
        e.set_color(png::ColorType::Rgb);
        e.set_depth(png::BitDepth::Eight);
        e.write_header()
            .unwrap()
            .write_image_data(&img.data)
            .unwrap();
    }
    let mut webp_bytes = Vec::new();
    image_webp::WebPEncoder::new(&mut webp_bytes)
        .encode(
            &img.data,
            img.width,
            img.height,
            image_webp::ColorType::Rgb8,
        )
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut batches = Vec::new();
    for (ext, body) in [("png", &png_bytes), ("webp", &webp_bytes)] {
        let shard = dir.path().join(format!("{ext}.tar"));
        let mut b = tar::Builder::new(std::fs::File::create(&shard).unwrap());
        append(&mut b, &format!("x.{ext}"), body);
        append(&mut b, "x.cls", b"3");
        b.into_inner().unwrap();
        let s = Source::webdataset([shard.to_str().unwrap()]).unwrap();
        let mut p = builder(s).batch_size(1).build().unwrap();
        let got: Vec<_> = p.epoch(0).map(Result::unwrap).collect();
        assert_eq!(got.len(), 1, "{ext}");
        assert!(got[0].skipped().is_empty(), "{ext}: {:?}", got[0].skipped());
        assert_eq!(got[0].labels(), [3]);
        batches.push(got[0].images().as_bytes().unwrap().to_vec());
    }
    assert!(
        batches[0] == batches[1],
        "WebP and PNG give the same pixels"
    );
    assert!(batches[0].iter().any(|&b| b != batches[0][0]), "not blank");
}

/// Each delivered sample's pixels by sample index, over one epoch.
fn pixels_by_sample(p: &mut Pipeline, epoch: u64) -> std::collections::BTreeMap<u32, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    for b in p.epoch(epoch) {
        let b = b.unwrap();
        let bytes = b.images().as_bytes().unwrap();
        let per = bytes.len() / b.indices().len();
        for (i, &ix) in b.indices().iter().enumerate() {
            assert!(
                out.insert(ix, bytes[i * per..(i + 1) * per].to_vec())
                    .is_none()
            );
        }
    }
    out
}

/// `stream_shards`: 7 shards of 4 over 2 ranks (Uneven): rank 0 reads
/// shards 0, 2, 4, 6 and rank 1 the others, every sample once; each
/// sample's pixels are the folder pipeline's (crops depend on the sample,
/// not on the order); the order is the same whatever the thread counts;
/// a folder source is refused.
fn streaming_gives_each_rank_its_shards_through_the_buffer() {
    let folder = Source::image_folder(common::sample_dir()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shards = pack(&folder, dir.path(), 4);
    let names: Vec<String> = shards.iter().map(|p| p.display().to_string()).collect();
    let wds = Source::webdataset(&names).unwrap();
    let want = pixels_by_sample(&mut builder(folder.clone()).build().unwrap(), 1);
    let mut seen = Vec::new();
    for rank in 0..2usize {
        let streamed = |readers, workers| {
            builder(wds.clone())
                .shard(rank, 2)
                .shard_mode(ShardMode::Uneven)
                .stream_shards(6)
                .readers(readers)
                .workers(workers)
                .build()
                .unwrap()
        };
        let mut p = streamed(1, 1);
        let order: Vec<u32> = p
            .epoch(1)
            .flat_map(|b| b.unwrap().indices().to_vec())
            .collect();
        assert_eq!(order.len(), if rank == 0 { 16 } else { 12 });
        assert!(
            order.iter().all(|&i| (i as usize / 4) % 2 == rank),
            "{order:?}"
        );
        let again: Vec<u32> = streamed(3, 2)
            .epoch(1)
            .flat_map(|b| b.unwrap().indices().to_vec())
            .collect();
        assert_eq!(order, again, "the order does not depend on threads");
        for (ix, px) in pixels_by_sample(&mut p, 1) {
            assert!(want[&ix] == px, "sample {ix}");
        }
        seen.extend(order);
    }
    seen.sort();
    assert_eq!(seen, (0..28).collect::<Vec<u32>>());
    let e = builder(folder).stream_shards(6).build().unwrap_err();
    assert!(e.to_string().contains("webdataset"), "{e}");
}

/// `with_labels`: keys without a (good) `cls` member get the function's
/// label and are delivered; two images under one key still fail.
fn labels_from_a_function_replace_missing_cls_members() {
    let dir = tempfile::tempdir().unwrap();
    let shard = dir.path().join("nocls.tar");
    let jpeg = std::fs::read(common::sample_dir().join("cat/cat-300572_1280.jpg")).unwrap();
    let mut b = tar::Builder::new(std::fs::File::create(&shard).unwrap());
    for (name, body) in [
        ("a.jpg", &jpeg[..]),
        ("b.jpg", &jpeg[..]),
        ("b.cls", b"cat"),
        ("c.jpg", &jpeg[..]),
        ("c.cls", b"1"),
        ("d.jpg", &jpeg[..]),
        ("d.jpeg", &jpeg[..]),
    ] {
        append(&mut b, name, body);
    }
    b.into_inner().unwrap();
    let s = Source::webdataset([shard.to_str().unwrap()])
        .unwrap()
        .with_labels(|x| match x.path.file_stem().and_then(|k| k.to_str()) {
            Some("a") => 5,
            Some("b") => 6,
            _ => x.label,
        });
    let labels: Vec<u32> = s.samples().iter().map(|x| x.label).collect();
    assert_eq!(labels, [5, 6, 1, 0]);
    let mut p = builder(s).batch_size(4).build().unwrap();
    let batches: Vec<_> = p.epoch(0).map(Result::unwrap).collect();
    let mut got: Vec<(String, u32)> = batches
        .iter()
        .flat_map(|b| {
            b.keys()
                .iter()
                .zip(b.labels())
                .map(|(k, &l)| (k.file_name().unwrap().to_string_lossy().into_owned(), l))
                .collect::<Vec<_>>()
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("a.jpg".into(), 5),
            ("b.jpg".into(), 6),
            ("c.jpg".into(), 1)
        ]
    );
    let errors: Vec<String> = batches
        .iter()
        .flat_map(|b| b.skipped().iter().map(Error::to_string))
        .collect();
    assert!(
        errors.len() == 1 && errors[0].contains("two image members"),
        "{errors:?}"
    );
}
