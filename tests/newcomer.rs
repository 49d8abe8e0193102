//! What a newcomer's first hour turned up (issue 15, item 6), one test each
//! on the library's side; the CLI's are in tests/cli.rs.

mod common;

use std::path::Path;

use gpufeed::{Device, Error, Pipeline, Source};

fn copy_good(from: &str, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(common::sample_dir().join(from), to).unwrap();
}

/// The CPU pipeline over the ImageFolder at `root`, unshuffled, batches
/// of 2 at 16 px.
fn in_order(root: &std::path::Path) -> Pipeline {
    Pipeline::builder()
        .source(Source::image_folder(root).unwrap())
        .device(Device::Cpu)
        .shuffle(false)
        .batch_size(2)
        .output_size(16, 16)
        .build()
        .unwrap()
}

#[test]
fn an_epoch_where_every_sample_fails_ends_with_the_error_list() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..5 {
        let p = dir.path().join(format!("cls/bad{i}.jpg"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"not a jpeg").unwrap();
    }
    let mut p = Pipeline::builder()
        .source(Source::image_folder(dir.path()).unwrap())
        .device(Device::Cpu)
        .batch_size(2)
        .output_size(16, 16)
        .build()
        .unwrap();
    for epoch in 0..2 {
        let items: Vec<_> = p.epoch(epoch).collect();
        assert_eq!(items.len(), 1, "one error, no batches");
        match &items[0] {
            Err(Error::NoSamples { epoch: e, skipped }) => {
                assert_eq!(*e, epoch);
                assert_eq!(skipped.len(), 5);
                assert!(skipped.iter().all(|s| s.to_string().contains("bad")));
            }
            other => panic!("{other:?}"),
        }
    }
}

/// Failures after the last good sample ride on the last batch.
#[test]
fn a_tail_that_all_fails_is_not_an_empty_batch() {
    let dir = tempfile::tempdir().unwrap();
    copy_good("cat/cat-300572_1280.jpg", &dir.path().join("cls/a.jpg"));
    copy_good("cat/cat-300572_1280.jpg", &dir.path().join("cls/b.jpg"));
    for n in ["y", "z"] {
        std::fs::write(dir.path().join(format!("cls/{n}.jpg")), b"junk").unwrap();
    }
    let mut p = in_order(dir.path());
    let batches: Vec<_> = p.epoch(0).map(Result::unwrap).collect();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].len(), 2);
    let names: Vec<String> = batches[0].skipped().iter().map(|e| e.to_string()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        names[0].contains("y.jpg") && names[1].contains("z.jpg"),
        "{names:?}"
    );
}

#[test]
fn a_configuration_that_cannot_fit_is_refused_with_the_bytes_it_needs() {
    let b = || {
        Pipeline::builder()
            .source(Source::image_folder(common::sample_dir()).unwrap())
            .device(Device::Cpu)
    };
    // 4 buffers of 4096 x 3 x 16384 x 16384 f32: about 52 TB.
    let e = b()
        .batch_size(4096)
        .output_size(16384, 16384)
        .build()
        .unwrap_err();
    let want = 4u64 * 4096 * 3 * 16384 * 16384 * 4;
    assert!(
        e.to_string().contains(&format!("needs {want} bytes")),
        "{e}"
    );
    assert!(
        b().batch_size(4096)
            .output_size(16384, 16384)
            .check()
            .is_err()
    );
    assert!(b().check().is_ok());
}

#[test]
fn thread_counts_are_bounded() {
    let b = || {
        Pipeline::builder()
            .source(Source::image_folder(common::sample_dir()).unwrap())
            .device(Device::Cpu)
    };
    let e = b().workers(10_000).build().unwrap_err();
    assert!(
        e.to_string().contains("workers 10000 outside 1..=1024"),
        "{e}"
    );
    let e = b().readers(0).build().unwrap_err();
    assert!(e.to_string().contains("readers 0"), "{e}");
    assert!(b().workers(1024).check().is_ok());
}

#[test]
fn errors_debug_print_as_they_display() {
    // `fn main() -> gpufeed::Result<()>` prints the Debug form.
    let e = Source::image_folder("/nonexistent/gpufeed").unwrap_err();
    assert_eq!(format!("{e:?}"), e.to_string());
    assert!(e.to_string().starts_with("/nonexistent/gpufeed: "), "{e}");
}

#[test]
fn image_folder_on_a_flat_folder_points_to_recursive() {
    let dir = tempfile::tempdir().unwrap();
    copy_good("cat/cat-300572_1280.jpg", &dir.path().join("a.jpg"));
    let e = Source::image_folder(dir.path()).unwrap_err();
    assert!(e.to_string().contains("Source::recursive"), "{e}");
    assert_eq!(Source::recursive(dir.path()).unwrap().len(), 1);
}

#[test]
fn image_folder_says_what_it_left_out() {
    let dir = tempfile::tempdir().unwrap();
    copy_good("cat/cat-300572_1280.jpg", &dir.path().join("cat/a.jpg"));
    copy_good("cat/cat-300572_1280.jpg", &dir.path().join("cat/b.png"));
    copy_good("cat/cat-300572_1280.jpg", &dir.path().join("dog/c.PNG"));
    copy_good("cat/cat-300572_1280.jpg", &dir.path().join("loose.jpg"));
    let s = Source::image_folder(dir.path()).unwrap();
    assert_eq!(s.len(), 1);
    let left = s.left_out();
    assert_eq!(left.total(), 3);
    assert_eq!(left.by_extension.get("png"), Some(&2));
    assert_eq!(left.at_root, 1);
    let text = left.to_string();
    assert!(text.starts_with("3 files left out: 2 .png"), "{text}");
    assert!(text.contains("1 at the root"), "{text}");
    assert!(text.contains("b.png") && text.contains("c.PNG"), "{text}");
}

#[test]
fn file_lists_in_the_common_forms() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("train.txt");
    // Caffe/ImageNet style, a header, comments, a path with a space in a
    // tab-separated line.
    std::fs::write(
        &list,
        "path label\n# comment\nn01/a.JPEG 0\nn02/b.JPEG   12\nwith space.jpg\t3\n",
    )
    .unwrap();
    let s = Source::file_list(&list).unwrap();
    let got: Vec<_> = s
        .samples()
        .iter()
        .map(|x| (x.path.clone(), x.label))
        .collect();
    assert_eq!(
        got,
        vec![
            (dir.path().join("n01/a.JPEG"), 0),
            (dir.path().join("n02/b.JPEG"), 12),
            (dir.path().join("with space.jpg"), 3),
        ]
    );
    // Only the first line may be a header.
    std::fs::write(&list, "a.jpg 1\nb.jpg two\n").unwrap();
    let e = Source::file_list(&list).unwrap_err();
    assert!(e.to_string().contains("line 2"), "{e}");
    // Entries outside the list's folder need the explicit constructor.
    for entry in ["../x.jpg 1\n", "/etc/passwd 1\n", "a/../../x.jpg 1\n"] {
        std::fs::write(&list, entry).unwrap();
        let e = Source::file_list(&list).unwrap_err();
        assert!(e.to_string().contains("outside the list's folder"), "{e}");
        assert_eq!(Source::file_list_anywhere(&list).unwrap().len(), 1);
    }
}

/// Issue 19, item 4: a PNG under a `.jpg` name is an image.
#[test]
fn a_png_named_jpg_is_an_image() {
    let dir = tempfile::tempdir().unwrap();
    copy_good("cat/cat-300572_1280.jpg", &dir.path().join("cls/a.jpg"));
    let png =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/go/video-001.png");
    std::fs::copy(png, dir.path().join("cls/b.jpg")).unwrap();
    let mut p = in_order(dir.path());
    let b = p.epoch(0).next().unwrap().unwrap();
    assert_eq!(b.len(), 2, "{:?}", b.skipped());
    assert!(b.skipped().is_empty());
    let (a, png) = b.images().as_f32().unwrap().split_at(3 * 16 * 16);
    assert!(png.iter().any(|v| v.abs() > 0.1) && a != png);
}
