//! An agent file: loading ends in an agent or in an error naming the file and field.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_core::agent::AgentSpec;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match AgentSpec::parse("fuzz.yaml", text) {
        Ok(spec) => {
            let _ = spec.tool_decls();
        }
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.contains("fuzz.yaml"),
                "an error that does not name the file: {message}"
            );
        }
    }
});
