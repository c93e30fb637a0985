//! Integration tests of cairn-embed through its public API. The tests against a real model are
//! `#[ignore]`d: run them after `scripts/install-model.sh` with
//! `CAIRN_EMBED_MODEL=<its last line of output> cargo test --release -p cairn-embed -- --ignored`.

mod real_model;
