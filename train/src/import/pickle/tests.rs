//! The rewriter against hand-assembled pickles.

use super::*;

#[test]
fn ordered_dict_with_metadata_becomes_dict_with_state_entry() {
    // pickle.dumps(od, 2) for od = OrderedDict(a=1) with od._metadata = {}:
    // GLOBAL OrderedDict, BINPUT 0, EMPTY_TUPLE, REDUCE, BINPUT 1, MARK, 'a', 1,
    // SETITEMS, EMPTY_DICT, BINPUT 2, MARK, '_metadata', EMPTY_DICT, SETITEMS, BUILD, STOP
    let mut p = vec![0x80, 2];
    p.extend_from_slice(b"ccollections\nOrderedDict\nq\x00)Rq\x01(X\x01\x00\x00\x00aK\x01u}q\x02(X\x09\x00\x00\x00_metadata}ub.");
    let r = rewrite(&p, 0).unwrap();
    let mut want = vec![0x80, 2];
    want.extend_from_slice(b"}r\x01\x00\x00\x00(X\x01\x00\x00\x00aK\x01u");
    want.extend_from_slice(b"X\x17\x00\x00\x00__segtool_build_state__");
    want.extend_from_slice(b"}r\x02\x00\x00\x00(X\x09\x00\x00\x00_metadata}us.");
    assert_eq!(r.pickle, want);
    assert_eq!(r.end, p.len());
}

#[test]
fn persistent_ids_are_collected_and_long1_widened() {
    // MARK 'storage' GLOBAL torch HalfStorage '7' 'cpu' LONG1(3 bytes) TUPLE BINPERSID STOP
    let mut p = vec![0x80, 2];
    p.extend_from_slice(b"(X\x07\x00\x00\x00storagectorch\nHalfStorage\nX\x01\x00\x00\x007X\x03\x00\x00\x00cpu\x8a\x03\x00\x00\x01tQ.");
    let r = rewrite(&p, 0).unwrap();
    assert_eq!(
        r.storages,
        vec![StorageRef {
            key: "7".into(),
            dtype: "Half".into(),
            numel: 65536
        }]
    );
    assert_eq!(r.storages[0].element_size(), Some(2));
    let long1 = r
        .pickle
        .windows(2)
        .position(|w| w == [0x8a, 8])
        .expect("LONG1 widened to 8 bytes");
    assert_eq!(&r.pickle[long1 + 2..long1 + 10], &65536i64.to_le_bytes());
}

#[test]
fn memo_ids_are_renumbered_densely() {
    // EMPTY_DICT, LONG_BINPUT 0x7e000000, EMPTY_LIST, BINPUT 9, LONG_BINGET 0x7e000000,
    // BINGET 9, TUPLE2, STOP: libtorch would size its memo table for 2^31 entries.
    let p = b"\x80\x02}r\x00\x00\x00\x7e]q\x09j\x00\x00\x00\x7eh\x09\x86.";
    let r = rewrite(p, 0).unwrap();
    let mut want = vec![0x80, 2];
    want.extend_from_slice(b"}r\x00\x00\x00\x00]r\x01\x00\x00\x00");
    want.extend_from_slice(b"j\x00\x00\x00\x00j\x01\x00\x00\x00\x86.");
    assert_eq!(r.pickle, want);
}

#[test]
fn truncation_and_foreign_opcodes_are_errors() {
    assert!(matches!(
        rewrite(&[0x80, 2, b'X', 9, 0], 0),
        Err(PickleError::Truncated)
    ));
    assert!(matches!(
        rewrite(&[0x80, 2, b'N'], 0),
        Err(PickleError::NoStop)
    ));
    assert!(matches!(
        rewrite(b"I1\n.", 0),
        Err(PickleError::Unsupported(b'I', 0))
    ));
}
