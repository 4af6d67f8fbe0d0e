//! The normal form a resource URI is matched in: a deny glob on URIs holds however the URI is spelled.
//!
//! Following RFC 3986 §6.2.2 (syntax-based normalisation) with the `url` crate's parser (WHATWG URL): the
//! scheme and the host are lower-cased; percent-encoded unreserved characters (`%2E` for `.`, `%41` for
//! `A`, …) are decoded; dot segments (`/./`, `/../`) are resolved; a `file:` URI's `localhost` authority is
//! dropped (`file://localhost/x` is `file:///x`). A URI with a control character, surrounding blanks or no
//! scheme has no normal form and is refused, never matched leniently: a parser that drops a tab
//! (`config://sec\trets`) or trims a blank would otherwise read one resource where the glob saw another.
//!
//! Nor has a URI whose authority or path holds what an upstream may read as structure the normal form
//! does not show: an encoded separator (`%2F`, `%5C`, any case: `file:///srv/notes/..%2F..%2Fetc%2Fpasswd`
//! is one segment here and `/etc/passwd` to an upstream that decodes it), an encoded control character, a
//! dot segment left unresolved (in an opaque path, `x:a/../b`), or a `file:` URI naming a host other than
//! the local one (`file://x/home/me/.env`, which `file:///**` globs do not see). What is left between a URI
//! and its normal form is spelling every reader agrees on, so the gateway forwards the client's URI as it
//! came (an upstream matching its resources by their exact URIs still finds them) and the policy's verdict
//! on the normal form holds for it.

use url::{Position, Url};

/// Why a URI has no normal form.
pub(crate) const UNREADABLE_URI: &str = "a URI with control characters, surrounding blanks, no scheme, an encoded separator or control character, an unresolved dot segment, or a `file:` host";

/// `uri` in normal form, or `None` for one that has none (see the [module](self)).
pub(crate) fn normalise(uri: &str) -> Option<String> {
    if uri.is_empty() || uri.trim() != uri || uri.chars().any(char::is_control) {
        return None;
    }
    let decoded = decode_unreserved(uri);
    let mut url = Url::parse(&decoded).ok()?;
    // The parser lower-cases the hosts of the schemes it knows (`http`, `file`, …); others' hosts are opaque
    // to it, but RFC 3986 makes every host case-insensitive.
    if let Some(host) = url.host_str()
        && host.bytes().any(|b| b.is_ascii_uppercase())
    {
        let lower = host.to_ascii_lowercase();
        url.set_host(Some(&lower)).ok()?;
    }
    // The parser has already dropped `localhost` (and resolved what dot segments it can).
    if url.scheme() == "file" && url.host_str().is_some_and(|host| !host.is_empty()) {
        return None;
    }
    if has_hidden_structure(&url[Position::BeforeUsername..Position::AfterPath])
        || url.path().split('/').any(|segment| segment == "." || segment == "..")
    {
        return None;
    }
    Some(url.into())
}

/// Whether `part` (a URI's authority and path, as the parser serialised them) holds an escape an upstream
/// decoding it would read as structure: a separator (`%2F`, `%5C`) or a control character (`%00`–`%1F`,
/// `%7F`).
fn has_hidden_structure(part: &str) -> bool {
    part.match_indices('%').any(|(at, _)| {
        part.get(at + 1..at + 3)
            .and_then(|hex| u8::from_str_radix(hex, 16).ok())
            .is_some_and(|byte| matches!(byte, b'/' | b'\\') || byte.is_ascii_control())
    })
}

/// Decodes `%XX` where it encodes an unreserved character (ALPHA, DIGIT, `-`, `.`, `_`, `~`): the same URI
/// either way (RFC 3986 §2.3). Other escapes stay as they are.
fn decode_unreserved(uri: &str) -> String {
    let bytes = uri.as_bytes();
    let mut out = String::with_capacity(uri.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = uri.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
            && (byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~'))
        {
            out.push(char::from(byte));
            i += 3;
            continue;
        }
        // `uri` is a `str` and `%` is ASCII: copy up to the next `%`, whole characters.
        let next = uri[i + 1..].find('%').map_or(uri.len(), |at| i + 1 + at);
        out.push_str(&uri[i..next]);
        i = next;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_uri_have_one_normal_form() {
        for (spelling, normal) in [
            ("config://secrets", "config://secrets"),
            ("CONFIG://secrets", "config://secrets"),
            ("Config://secrets", "config://secrets"),
            ("config://SECRETS", "config://secrets"),
            ("config://secr%65ts", "config://secrets"),
            ("config://app/../secrets", "config://app/secrets"),
            ("file:///home/me/.env", "file:///home/me/.env"),
            ("file://localhost/home/me/.env", "file:///home/me/.env"),
            ("FILE://LOCALHOST/home/me/.env", "file:///home/me/.env"),
            ("file:///home/me/%2Eenv", "file:///home/me/.env"),
            ("file:///home/me/%2eenv", "file:///home/me/.env"),
            ("file:///home/me/x/../.env", "file:///home/me/.env"),
            ("file:///home/me/./.env", "file:///home/me/.env"),
            ("file:///home/me/x/%2E%2E/.env", "file:///home/me/.env"),
            ("note://a%20b", "note://a%20b"),
            ("note://n/a%2Cb?path=x%2Fy", "note://n/a%2Cb?path=x%2Fy"),
            ("file:///srv/notes/a%20b.txt", "file:///srv/notes/a%20b.txt"),
            ("file:///srv/notes/.%2e/x", "file:///srv/x"),
        ] {
            assert_eq!(normalise(spelling).as_deref(), Some(normal), "{spelling}");
        }
    }

    #[test]
    fn control_characters_blanks_and_relative_references_have_none() {
        for uri in [" config://secrets", "config://secrets ", "config://sec\trets", "config://sec\nrets", "secrets", ""]
        {
            assert_eq!(normalise(uri), None, "{uri:?}");
        }
    }

    #[test]
    fn structure_an_upstream_may_decode_and_foreign_file_hosts_have_none() {
        for uri in [
            "file:///srv/notes/..%2F..%2Fetc%2Fpasswd",
            "file:///srv/notes/..%2f..%2fetc%2fpasswd",
            "file:///home/me/docs%2F..%2F.env",
            "file:///srv/notes/..%5C..%5Cetc%5Cpasswd",
            "file:///srv/notes/..%5c..%5cetc%5cpasswd",
            "config://sec%2Frets",
            "note://a%2Fb",
            "file:///srv/notes/x%00.txt",
            "file:///srv/notes/x%0a.txt",
            "file:///srv/notes/x%7F.txt",
            "file://x/home/me/.env",
            "file://X/home/me/.env",
            "file://evil.example/home/me/.env",
            "file://127.0.0.1/home/me/.env",
            "x:srv/notes/../../etc/passwd",
            "x:srv/notes/%2E%2E/%2e%2e/etc/passwd",
            "x:./secrets",
        ] {
            assert_eq!(normalise(uri), None, "{uri:?}");
        }
    }

    /// Every escape decoded, as an upstream that percent-decodes a whole path reads it.
    fn decode_all(text: &str) -> Vec<u8> {
        let bytes = text.as_bytes();
        let (mut out, mut i) = (Vec::new(), 0);
        while i < bytes.len() {
            match text.get(i + 1..i + 3).and_then(|hex| u8::from_str_radix(hex, 16).ok()) {
                Some(byte) if bytes[i] == b'%' => {
                    out.push(byte);
                    i += 3;
                }
                _ => {
                    out.push(bytes[i]);
                    i += 1;
                }
            }
        }
        out
    }

    proptest::proptest! {
        /// A normal form is its own, and an upstream decoding its path reads the segments the globs saw: no
        /// more, no dot segment among them, and a `file:` URI is on this host.
        #[test]
        fn a_normal_form_reads_the_same_decoded(
            prefix in "(file:///|file://localhost/|file://x/|FILE://LocalHost/|note://n/|x:)",
            segments in proptest::collection::vec("(a|B|\\.|%2[eEfF]|%5[cC]|%00|%41|%25|\\\\){0,4}", 0..6),
        ) {
            let uri = format!("{prefix}{}", segments.join("/"));
            if let Some(normal) = normalise(&uri) {
                proptest::prop_assert_eq!(normalise(&normal), Some(normal.clone()), "{:?}", uri);
                let url = Url::parse(&normal).unwrap();
                let path = url.path();
                let decoded = decode_all(path);
                let split = |bytes: &[u8], separator: u8| bytes.iter().filter(|&&b| b == separator).count();
                proptest::prop_assert_eq!(split(&decoded, b'/'), split(path.as_bytes(), b'/'), "{:?}", uri);
                proptest::prop_assert_eq!(split(&decoded, b'\\'), split(path.as_bytes(), b'\\'), "{:?}", uri);
                let dots = decoded.split(|&b| b == b'/').any(|segment| segment == b"." || segment == b"..");
                proptest::prop_assert!(!dots, "{:?} reads as {:?}", uri, String::from_utf8_lossy(&decoded));
                proptest::prop_assert!(url.scheme() != "file" || url.host_str().unwrap_or("").is_empty(), "{:?}", uri);
            }
        }
    }
}
