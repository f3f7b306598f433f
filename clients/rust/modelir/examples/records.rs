//! Print every record's key, status and text (the README's record-reading program):
//! `cargo run -p modelir --example records -- FILE`.
use modelir::{ChoiceExt, Completion};

fn main() -> std::io::Result<()> {
    let path = std::env::args().nth(1).expect("a record file");
    let mut records = modelir::RecordReader::open(path)?; // JSON Lines or binary, sniffed from the first byte
    for stored in records.by_ref() {
        let r = stored?.record;
        println!("{} {} {}", r.key, r.status, r.response.map(|a| a.first().text()).unwrap_or_default());
    }
    Ok(())
}
