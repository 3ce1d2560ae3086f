//! Files a member or the command-line tool reads that an operator or a
//! peer hands it: backup files, and snapshot images (the archive a leader
//! streams to a follower, and a backup's body).

use lode_types::backup::{encode_header, read_header, ImageCheck, BACKUP_MAGIC};

/// A backup file. With an odd first byte the rest is taken as the header's
/// body and framed with a correct length and digest, so the fuzzer reaches
/// the header's decoding past the digest it could not forge. A header that
/// reads encodes to a header that reads the same; an image that passes the
/// check is exactly as long as the header says.
pub fn backup_files(data: &[u8]) {
    let Some((mode, rest)) = data.split_first() else {
        return;
    };
    let file = if mode % 2 == 1 {
        let mut file = BACKUP_MAGIC.to_vec();
        file.extend_from_slice(&(rest.len() as u32).to_be_bytes());
        file.extend_from_slice(rest);
        file.extend_from_slice(&lode_types::auth::sha256(rest));
        file
    } else {
        rest.to_vec()
    };
    let mut input = file.as_slice();
    let Ok((header, header_bytes)) = read_header(&mut input) else {
        return;
    };
    let encoded = encode_header(&header).expect("a header read encodes");
    let (again, again_bytes) = read_header(&mut encoded.as_slice()).expect("an encoded header reads");
    assert_eq!(header, again);
    assert_eq!(again_bytes as usize, encoded.len());
    let image = &file[header_bytes as usize..];
    let mut check = ImageCheck::new(&header);
    let chunk_bytes = usize::from(*mode).max(1);
    let streamed = image.chunks(chunk_bytes).try_for_each(|chunk| check.update(chunk));
    if streamed.is_ok() && check.finish().is_ok() {
        assert_eq!(
            image.len() as u64,
            header.image_bytes,
            "an image of another length passed"
        );
    }
}

/// The magic a snapshot image starts with (`image_archive.rs`).
const IMAGE_MAGIC: &[u8; 8] = b"LODEIMG\x01";

/// A snapshot image written from the layout `image_archive.rs` documents,
/// independently of its writer: the magic, per file a tag 1, the name's
/// length (u16), the name, the contents' length (u64) and the contents,
/// a tag 0, then the SHA-256 of every byte before it.
pub fn reference_image(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut image = IMAGE_MAGIC.to_vec();
    for (name, contents) in files {
        image.push(1);
        image.extend_from_slice(&(name.len() as u16).to_be_bytes());
        image.extend_from_slice(name.as_bytes());
        image.extend_from_slice(&(contents.len() as u64).to_be_bytes());
        image.extend_from_slice(contents);
    }
    image.push(0);
    let digest = lode_types::auth::sha256(&image);
    image.extend_from_slice(&digest);
    image
}

/// A snapshot image. With an odd first byte the rest follows the magic
/// and is closed with a correct digest, so the fuzzer reaches the file
/// records past the digest. An image that reads is exactly what the
/// reference writes for the files read: the format leaves no freedom but
/// the files' order, so no two images read alike.
pub fn snapshot_images(data: &[u8]) {
    let Some((mode, rest)) = data.split_first() else {
        return;
    };
    let image = if mode % 2 == 1 {
        let mut image = IMAGE_MAGIC.to_vec();
        image.extend_from_slice(rest);
        let digest = lode_types::auth::sha256(&image);
        image.extend_from_slice(&digest);
        image
    } else {
        rest.to_vec()
    };
    let Ok(files) = lode_raft_store::engine::image_archive::read_files(&image) else {
        return;
    };
    assert!(
        reference_image(&files) == image,
        "an image read as {} files is not what they write",
        files.len()
    );
}
