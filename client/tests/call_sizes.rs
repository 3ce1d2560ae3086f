//! The size of a call's future in the SDK: each async layer (the caller's,
//! `get`, `query`, `read`, `send`) copies the one below it as it starts
//! it, so a large future is copied once per layer on every call. The
//! attempt (the channel's call inside its timeout) is boxed once per
//! attempt and kept out of the layers above it.

use lode_client::sdk::Client;

/// Bytes a waiting get or put may hold in the caller's future; the
/// attempt boxed inside is not counted. Before the attempt was boxed a get
/// held 4,624 bytes and a put 5,168.
const CALL_FUTURE_BYTES_MAX: usize = 2_048;

#[test]
fn a_get_or_a_put_holds_no_attempt_in_the_callers_future() {
    // Nothing is dialed until a future is polled.
    let client = Client::connect(["127.0.0.1:1"]).expect("an endpoint list parses");
    let kv = client.kv("sizes");
    let get = kv.get("key");
    let put = kv.set("key").bytes("value").send();
    let get_bytes = std::mem::size_of_val(&get);
    let put_bytes = std::mem::size_of_val(&put);
    assert!(
        get_bytes <= CALL_FUTURE_BYTES_MAX,
        "a get's future holds {get_bytes} bytes, over {CALL_FUTURE_BYTES_MAX}"
    );
    assert!(
        put_bytes <= CALL_FUTURE_BYTES_MAX,
        "a put's future holds {put_bytes} bytes, over {CALL_FUTURE_BYTES_MAX}"
    );
}
