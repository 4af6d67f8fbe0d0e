//! The normal form a resource URI is matched in: a deny glob on URIs holds however the URI is spelled.
//!
//! Following RFC 3986 §6.2.2 (syntax-based normalisation) with the `url` crate's parser (WHATWG URL): the
//! scheme and the host are lower-cased; percent-encoded unreserved characters (`%2E` for `.`, `%41` for
//! `A`, …) are decoded; dot segments (`/./`, `/../`) are resolved; a `file:` URI's `localhost` authority is
//! dropped (`file://localhost/x` is `file:///x`). A URI with a control character, surrounding blanks or no
//! scheme has no normal form and is refused, never matched leniently: a parser that drops a tab
//! (`config://sec\trets`) or trims a blank would otherwise read one resource where the glob saw another.

use url::Url;

/// Why a URI has no normal form.
pub(crate) const UNREADABLE_URI: &str = "a URI with control characters, surrounding blanks or no scheme";

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
    Some(url.into())
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
}
