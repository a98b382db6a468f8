//! What both engine binaries share: the command line, the fixed prompt, the process's peak
//! memory and the result line that `run.sh` reads.

use std::path::PathBuf;
use std::time::Duration;

/// The number of tokens generated after the prompt, greedily, whatever they are.
pub const GENERATED: usize = 128;

/// The prompt's text; it is repeated until it holds more than the prompt's token count, then
/// cut to that count (after the beginning-of-sequence token).
pub const PROMPT_TEXT: &str = "The history of the river town begins with a ferry, a mill and a \
    market on the east bank. Merchants crossed twice a week, and the miller kept a ledger of \
    every sack of grain. When the bridge was built, the ferry closed and the market moved to \
    the square, where it is held to this day. ";

/// The command line: `engine-X MODEL.gguf THREADS [PROMPT_TOKENS]`.
#[derive(Debug)]
pub struct Args {
    pub model: PathBuf,
    pub threads: usize,
    pub prompt_tokens: usize,
}

impl Args {
    /// Reads the command line; the error says what is expected.
    pub fn parse() -> Result<Self, String> {
        let usage = "usage: engine-X MODEL.gguf THREADS [PROMPT_TOKENS (default 256)]";
        let mut it = std::env::args().skip(1);
        let model = it.next().map(PathBuf::from).ok_or(usage)?;
        let threads = it
            .next()
            .ok_or(usage)?
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("THREADS must be a positive number; {usage}"))?;
        let prompt_tokens = match it.next() {
            Some(s) => s
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 1)
                .ok_or_else(|| format!("PROMPT_TOKENS must be a number above 1; {usage}"))?,
            None => 256,
        };
        Ok(Self {
            model,
            threads,
            prompt_tokens,
        })
    }
}

/// The prompt's text, long enough for `tokens` tokens of any vocabulary of these models.
#[must_use]
pub fn prompt_text(tokens: usize) -> String {
    PROMPT_TEXT.repeat(tokens / 32 + 2)
}

/// The process's peak resident memory (VmHWM), in MiB.
#[must_use]
pub fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The CPU time the process has used so far (all its threads, user and system), in seconds:
/// on a shared machine, what a phase cost does not depend on how much of the CPU it was given.
/// `/proc/self/stat`'s fields 14 and 15 count clock ticks of 1/100 s (`USER_HZ` on Linux).
#[must_use]
pub fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // After the name come field 3 (state) onwards: utime is field 14, stime field 15.
    (ticks(11) + ticks(12)) / 100.0
}

/// What one run measured.
#[derive(Debug)]
pub struct Report {
    pub engine: &'static str,
    pub threads: usize,
    pub load: Duration,
    pub prompt_tokens: usize,
    pub prompt: Duration,
    /// CPU seconds of the prompt.
    pub prompt_cpu: f64,
    pub generated: usize,
    pub generation: Duration,
    /// CPU seconds of the generation.
    pub generation_cpu: f64,
    pub text: String,
}

impl Report {
    /// Prints the result line (`RESULT key=value ...`) and the generated text (`TEXT: ...`).
    pub fn print(&self) {
        let tps = |n: usize, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
        println!(
            "RESULT engine={} threads={} load_s={:.3} prompt_tokens={} prompt_tps={:.1} prompt_cpu_s={:.2} gen_tokens={} gen_tps={:.1} gen_cpu_s={:.2} peak_rss_mib={:.0}",
            self.engine,
            self.threads,
            self.load.as_secs_f64(),
            self.prompt_tokens,
            tps(self.prompt_tokens, self.prompt),
            self.prompt_cpu,
            self.generated,
            tps(self.generated, self.generation),
            self.generation_cpu,
            peak_rss_mib(),
        );
        println!("TEXT: {:?}", self.text);
    }
}
