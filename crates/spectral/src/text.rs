//! Numbers in messages: a value such as `1e308` or `1e-308` that `Display` writes out in
//! full (309 digits) is shown in scientific form, so that an error or warning stays readable.

/// `text` with every decimal number longer than 24 characters (the `Display` of an `f64`
/// such as `1e308`, 309 digits, or `1e-308`) replaced by its scientific form; a number that
/// is part of a word or a path (a digit, letter, `_`, `/` or `.` beside it) is left alone.
pub fn compact_numbers(text: &str) -> String {
    const LONGEST: usize = 24;
    let b = text.as_bytes();
    let part_of_word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'/' || c == b'.';
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let starts = (b[i].is_ascii_digit()
            || (b[i] == b'-' && b.get(i + 1).is_some_and(u8::is_ascii_digit)))
            && (i == 0 || !part_of_word(b[i - 1]));
        if starts {
            let mut j = i + 1;
            while j < b.len() && (b[j].is_ascii_digit() || b[j] == b'.') {
                j += 1;
            }
            // a trailing period ends a sentence
            let mut end = j;
            while end > i + 1 && b[end - 1] == b'.' {
                end -= 1;
            }
            let token = &text[i..end];
            let alone =
                j >= b.len() || !(b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] == b'/');
            if end - i > LONGEST && alone {
                if let Ok(x) = token.parse::<f64>() {
                    out.push_str(&format!("{x:e}"));
                    i = end;
                    continue;
                }
            }
            out.push_str(&text[i..end]);
            i = end;
            continue;
        }
        let c = text[i..].chars().next().expect("a char at a char boundary");
        out.push(c);
        i += c.len_utf8();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::compact_numbers;

    #[test]
    fn long_numbers_are_shown_in_scientific_form() {
        let big = format!("got {}, and {}.", 1e308, -1e300);
        assert_eq!(compact_numbers(&big), "got 1e308, and -1e300.");
        assert_eq!(compact_numbers(&format!("got {}", 1e-308)), "got 1e-308");
        // short numbers, integers up to u64::MAX, words and paths unchanged
        for t in [
            "got 0.30000000000000004 and 18446744073709551615",
            "/tmp/run_0000000000000000000000000000001/x.toml: dt = 0.1",
            "checksum 0123456789012345678901234567890123abc",
            "",
            "α = 1, β = -2.",
        ] {
            assert_eq!(compact_numbers(t), t);
        }
    }
}
