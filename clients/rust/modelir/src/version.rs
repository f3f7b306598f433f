//! The IR version this client was generated from, read from its descriptors, and the compatibility rule.
use prost_reflect::{DescriptorPool, Value};
use std::sync::OnceLock;

use crate::error::Error;

/// The descriptor set of `proto/` the code was generated from (written by `buf build`).
pub const DESCRIPTOR_SET: &[u8] = include_bytes!("gen/modelir.fds.binpb");

/// The descriptors of `modelir.v1` (and what they import), for reflection and proto-JSON.
pub fn descriptor_pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| DescriptorPool::decode(DESCRIPTOR_SET).expect("the embedded descriptor set decodes"))
}

/// The `(modelir.v1.ir_version)` option of the `version.proto` this client was generated from. prost keeps no
/// file options, so it is read with prost-reflect from the embedded descriptor set.
pub fn ir_version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        let pool = descriptor_pool();
        let extension = pool.get_extension_by_name("modelir.v1.ir_version").expect("version.proto declares ir_version");
        let file = pool.get_file_by_name("modelir/v1/version.proto").expect("version.proto is in the set");
        match file.options().get_extension(&extension).as_ref() {
            Value::String(version) => version.clone(),
            other => panic!("ir_version is not a string: {other:?}"),
        }
    })
}

/// The major number of a semantic version, or None for anything that is not one.
pub fn major(version: &str) -> Option<u64> {
    let core = version.split(['-', '+']).next()?;
    let numbers: Vec<&str> = core.split('.').collect();
    let valid =
        |n: &&str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && (n.len() == 1 || !n.starts_with('0'));
    if numbers.len() != 3 || !numbers.iter().all(valid) {
        return None;
    }
    numbers[0].parse().ok()
}

/// `Err(Error::IncompatibleServer)` unless `server` has the major version of `client`.
pub fn check_compatible(server: &str, client: &str) -> Result<(), Error> {
    match (major(server), major(client)) {
        (Some(s), Some(c)) if s == c => Ok(()),
        _ => Err(Error::IncompatibleServer { client: client.to_owned(), server: server.to_owned() }),
    }
}
