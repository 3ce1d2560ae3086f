//! Files a member or the command-line tool reads that an operator hands
//! it: backup files.

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
