//! What `traqlyte` runs besides the product itself, so the binary stays clap parsing and
//! wiring: [`demo`] (an A/A experiment behind an at-least-once client, served in-process),
//! [`bench`](mod@bench) and [`bench_lineage`] and [`bench_segment`] (load generators that measure their reference in the
//! same run, for BENCHMARKS.md) and [`fire`] (one body sent many times concurrently, as a
//! client whose replies are lost; the tests run it from several OS processes).

#![deny(missing_docs)]

pub mod bench;
pub mod bench_growth;
mod bench_hot;
pub mod bench_lineage;
pub mod bench_metrics;
pub mod bench_nats;
pub mod bench_segment;
mod cpu;
pub mod demo;
pub mod fire;

/// `println!` for a command's output, through [`write_out`].
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::write_out(format_args!($($arg)*))
    };
}

/// `text` safe to print on an operator's terminal: each control character (an escape
/// sequence's `ESC`, a newline that would forge a line of output), each invisible one
/// (`/order_<U+200B>id` displays as `/order_id`) and each that reorders or breaks what
/// follows it (the bidirectional overrides, isolates and marks of "Trojan Source", which
/// make `evil` display as `live`; the line and paragraph separators) written as its Rust
/// escape (`\u{1b}`, `\n`, `\u{200b}`, `\u{202e}`). Tenants' data (a contract's pointers,
/// a rejected line's field) reaches the CLI's output this way; the server's log escapes
/// control characters.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(misleads_a_terminal) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(
        text.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_debug().to_string()
                } else if misleads_a_terminal(c) {
                    // Written whatever Rust deems printable (it prints a no-break space).
                    format!("\\u{{{:x}}}", u32::from(c))
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

/// A control character, or one that is invisible or changes how the text after it is
/// displayed: the characters identity treats as invisible
/// ([`traqlyte_identity::canonical::invisible`]: zero-width ones, Unicode's bidirectional
/// formatting characters of UAX #9, other format characters), and the line and paragraph
/// separators.
fn misleads_a_terminal(c: char) -> bool {
    c.is_control()
        || traqlyte_identity::canonical::invisible(c)
        || matches!(c, '\u{2028}' | '\u{2029}')
}

/// Writes one line of a command's output to stdout. A reader that stopped early
/// (`traqlyte tenant list | head -1`, `traqlyte demo --json | head -1`) ends the process
/// as it ends other Unix tools, by SIGPIPE's default action, where `println!` panicked
/// with a backtrace and status 101. Only here: SIGPIPE stays ignored for the rest of the
/// process, so a socket a peer closed (the database's, a client's) is an error to
/// handle, never a silent death. What a command wrote stays written: each commits before
/// it prints.
pub fn write_out(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let written = out
        .write_fmt(line)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    match written {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {
            // SAFETY: the default action of SIGPIPE, then SIGPIPE itself: the process
            // ends here as a Unix tool writing into a closed pipe does.
            unsafe {
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                libc::raise(libc::SIGPIPE);
            }
            std::process::exit(141);
        }
        Err(err) => {
            let _ = writeln!(std::io::stderr().lock(), "error: writing to stdout: {err}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod printable_tests {
    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(super::printable("/a/b"), "/a/b");
        assert_eq!(super::printable("/é/ü"), "/é/ü");
        assert_eq!(
            super::printable("/x\u{1b}[31mred\nSUSPECT /forged"),
            "/x\\u{1b}[31mred\\nSUSPECT /forged"
        );
    }

    #[test]
    fn characters_that_reorder_or_break_the_display_are_escaped() {
        // "Trojan Source": U+202E shows `/order_\u{202e}di` as `/order_id`.
        assert_eq!(
            super::printable("/order_\u{202e}di\u{202c}"),
            "/order_\\u{202e}di\\u{202c}"
        );
        assert_eq!(
            super::printable("a\u{2066}b\u{2069}\u{200f}\u{061c}\u{2028}c"),
            "a\\u{2066}b\\u{2069}\\u{200f}\\u{61c}\\u{2028}c"
        );
        // Invisible characters too: a zero-width space, a soft hyphen.
        assert_eq!(
            super::printable("/order_\u{200b}id/\u{ad}x"),
            "/order_\\u{200b}id/\\u{ad}x"
        );
        // Right-to-left text itself is kept: only the formatting characters are escaped.
        assert_eq!(super::printable("/שלום/مرحبا"), "/שלום/مرحبا");
    }
}
