//! Checks that turn a pattern's candidate into a finding: checksums, number ranges, decodings. Each one
//! removes a class of false positives a pattern alone would let through.

/// The Luhn (mod 10) check over ASCII digits.
pub(crate) fn luhn_valid(digits: &[u8]) -> bool {
    let mut sum = 0u32;
    for (position, &digit) in digits.iter().rev().enumerate() {
        let mut value = u32::from(digit.wrapping_sub(b'0'));
        if value > 9 {
            return false;
        }
        if position % 2 == 1 {
            value *= 2;
            if value > 9 {
                value -= 9;
            }
        }
        sum += value;
    }
    !digits.is_empty() && sum.is_multiple_of(10)
}

/// Whether `digits` (a candidate card number, ASCII digits) has a length and prefix some card network issues.
pub(crate) fn card_network_known(digits: &[u8]) -> bool {
    let len = digits.len();
    let prefix = |n: usize| -> u32 { digits.iter().take(n).fold(0, |acc, d| acc * 10 + u32::from(d - b'0')) };
    if !(12..=19).contains(&len) {
        return false;
    }
    match digits[0] {
        // Visa.
        b'4' => matches!(len, 13 | 16 | 19),
        // Mastercard 51–55 and 2221–2720; Maestro 50, 56–58.
        b'5' => match prefix(2) {
            51..=55 => len == 16,
            50 | 56..=58 => len >= 12,
            _ => false,
        },
        b'2' => (2221..=2720).contains(&prefix(4)) && len == 16,
        // Amex 34/37, JCB 35, Diners 30/36/38/39.
        b'3' => match prefix(2) {
            34 | 37 => len == 15,
            35 => (3528..=3589).contains(&prefix(4)) && len >= 16,
            30 | 36 | 38 | 39 => len >= 14,
            _ => false,
        },
        // Discover 6011/644–649/65, UnionPay 62, Maestro 67 and 63.
        b'6' => matches!(prefix(2), 60 | 62 | 63 | 64 | 65 | 67) && len >= 12,
        _ => false,
    }
}

/// Whether every digit is the same one (`0000 0000 0000 0000` passes Luhn but is a placeholder).
pub(crate) fn all_same(digits: &[u8]) -> bool {
    digits.windows(2).all(|pair| pair[0] == pair[1])
}

/// The length of an IBAN issued by `country` (two upper-case letters), per the SWIFT IBAN registry.
pub(crate) fn iban_length(country: &[u8]) -> Option<usize> {
    const LENGTHS: &[(&[u8; 2], usize)] = &[
        (b"AD", 24),
        (b"AE", 23),
        (b"AL", 28),
        (b"AT", 20),
        (b"AZ", 28),
        (b"BA", 20),
        (b"BE", 16),
        (b"BG", 22),
        (b"BH", 22),
        (b"BI", 27),
        (b"BR", 29),
        (b"BY", 28),
        (b"CH", 21),
        (b"CR", 22),
        (b"CY", 28),
        (b"CZ", 24),
        (b"DE", 22),
        (b"DJ", 27),
        (b"DK", 18),
        (b"DO", 28),
        (b"EE", 20),
        (b"EG", 29),
        (b"ES", 24),
        (b"FI", 18),
        (b"FK", 18),
        (b"FO", 18),
        (b"FR", 27),
        (b"GB", 22),
        (b"GE", 22),
        (b"GI", 23),
        (b"GL", 18),
        (b"GR", 27),
        (b"GT", 28),
        (b"HN", 28),
        (b"HR", 21),
        (b"HU", 28),
        (b"IE", 22),
        (b"IL", 23),
        (b"IQ", 23),
        (b"IS", 26),
        (b"IT", 27),
        (b"JO", 30),
        (b"KW", 30),
        (b"KZ", 20),
        (b"LB", 28),
        (b"LC", 32),
        (b"LI", 21),
        (b"LT", 20),
        (b"LU", 20),
        (b"LV", 21),
        (b"LY", 25),
        (b"MC", 27),
        (b"MD", 24),
        (b"ME", 22),
        (b"MK", 19),
        (b"MN", 20),
        (b"MR", 27),
        (b"MT", 31),
        (b"MU", 30),
        (b"NI", 28),
        (b"NL", 18),
        (b"NO", 15),
        (b"OM", 23),
        (b"PK", 24),
        (b"PL", 28),
        (b"PS", 29),
        (b"PT", 25),
        (b"QA", 29),
        (b"RO", 24),
        (b"RS", 22),
        (b"RU", 33),
        (b"SA", 24),
        (b"SC", 31),
        (b"SD", 18),
        (b"SE", 24),
        (b"SI", 19),
        (b"SK", 24),
        (b"SM", 27),
        (b"SO", 23),
        (b"ST", 25),
        (b"SV", 28),
        (b"TL", 23),
        (b"TN", 24),
        (b"TR", 26),
        (b"UA", 29),
        (b"VA", 22),
        (b"VG", 24),
        (b"XK", 20),
        (b"YE", 30),
    ];
    LENGTHS.iter().find(|(code, _)| code.as_slice() == country).map(|&(_, len)| len)
}

/// The ISO 13616 check: the IBAN (upper-case letters and digits, no spaces) with its first four characters
/// moved to the end, letters as 10–35, is 1 modulo 97.
pub(crate) fn iban_checksum_valid(iban: &[u8]) -> bool {
    if iban.len() < 5 {
        return false;
    }
    let mut remainder = 0u32;
    for &c in iban[4..].iter().chain(&iban[..4]) {
        remainder = match c {
            b'0'..=b'9' => (remainder * 10 + u32::from(c - b'0')) % 97,
            b'A'..=b'Z' => (remainder * 100 + u32::from(c - b'A' + 10)) % 97,
            _ => return false,
        };
    }
    remainder == 1
}

/// Whether a US SSN's parts are in the ranges the SSA issues: area 001–899 except 666, group 01–99, serial
/// 0001–9999, and not one of the numbers made famous by advertising.
pub(crate) fn ssn_valid(area: u16, group: u16, serial: u16) -> bool {
    let famous = matches!((area, group, serial), (78, 5, 1120) | (219, 9, 9999));
    (1..=899).contains(&area) && area != 666 && (1..=99).contains(&group) && (1..=9999).contains(&serial) && !famous
}

/// [`ssn_valid`] over exactly nine ASCII digits.
pub(crate) fn ssn_digits_valid(digits: &[u8]) -> bool {
    if digits.len() != 9 || !digits.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let number =
        |range: std::ops::Range<usize>| digits[range].iter().fold(0u16, |acc, d| acc * 10 + u16::from(d - b'0'));
    ssn_valid(number(0..3), number(3..5), number(5..9))
}

/// Decodes base64 in either alphabet (standard or URL-safe), padding optional. `None` if not base64.
pub(crate) fn decode_base64(text: &[u8]) -> Option<Vec<u8>> {
    let text = text.strip_suffix(b"==").or_else(|| text.strip_suffix(b"=")).unwrap_or(text);
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut buffer = 0u32;
    let mut bits = 0u32;
    for &c in text {
        let value = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        buffer = (buffer << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    // A single leftover base64 character (6 bits) cannot end valid base64.
    if bits >= 6 {
        return None;
    }
    Some(out)
}

/// Whether `text` is HTTP Basic credentials as Docker's `config.json` (`"auth"`) and npm's `_auth` keep them: padded
/// base64 of `user:password`, both parts non-empty, no control character, no blank in the user.
pub(crate) fn is_basic_credentials(text: &[u8]) -> bool {
    if text.len() < 8 || !text.len().is_multiple_of(4) {
        return false;
    }
    let Some(decoded) = decode_base64(text) else { return false };
    let Ok(decoded) = std::str::from_utf8(&decoded) else { return false };
    let Some((user, password)) = decoded.split_once(':') else { return false };
    !user.is_empty()
        && !password.is_empty()
        && !decoded.chars().any(char::is_control)
        && !user.chars().any(char::is_whitespace)
}

/// Whether a JWT's first segment decodes to a JSON object naming an algorithm, as every JOSE header does.
pub(crate) fn jwt_header_plausible(segment: &[u8]) -> bool {
    if segment.len() > 4096 {
        return false;
    }
    match decode_base64(segment) {
        Some(header) => header.first() == Some(&b'{') && header.windows(5).any(|w| w == b"\"alg\""),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn luhn() {
        for valid in ["4111111111111111", "5555555555554444", "378282246310005", "6011111111111117", "79927398713"] {
            assert!(luhn_valid(valid.as_bytes()), "{valid}");
        }
        for invalid in ["4111111111111112", "79927398710", "1234567812345678", "", "41111111111a1111"] {
            assert!(!luhn_valid(invalid.as_bytes()), "{invalid}");
        }
    }

    #[test]
    fn card_networks() {
        for known in ["4111111111111111", "5555555555554444", "2223003122003222", "378282246310005", "30569309025904"] {
            assert!(card_network_known(known.as_bytes()), "{known}");
        }
        for unknown in ["1234567812345670", "9111111111111111", "411111111111111", "37828224631000", "7000000000000000"]
        {
            assert!(!card_network_known(unknown.as_bytes()), "{unknown}");
        }
        assert!(all_same(b"0000000000000000"));
        assert!(!all_same(b"4111111111111111"));
    }

    #[test]
    fn iban() {
        for valid in
            ["DE89370400440532013000", "GB82WEST12345698765432", "FR1420041010050500013M02606", "NO9386011117947"]
        {
            assert!(iban_checksum_valid(valid.as_bytes()), "{valid}");
            assert_eq!(iban_length(&valid.as_bytes()[..2]), Some(valid.len()), "{valid}");
        }
        for invalid in ["DE89370400440532013001", "GB82WEST12345698765433", "DE8937", "DE89 3704"] {
            assert!(!iban_checksum_valid(invalid.as_bytes()), "{invalid}");
        }
        assert_eq!(iban_length(b"ZZ"), None);
        assert_eq!(iban_length(b"US"), None);
    }

    #[test]
    fn ssn_ranges() {
        assert!(ssn_digits_valid(b"123456789"));
        assert!(ssn_digits_valid(b"899991234"));
        assert!(ssn_digits_valid(b"001010001"));
        for invalid in [
            "000123456", // area 000
            "666123456", // area 666
            "900123456", // area 900–999 (ITINs, never SSNs)
            "123001234", // group 00
            "123450000", // serial 0000
            "078051120", // Woolworth's wallet card
            "219099999", // advertised in 1940
            "12345678",
            "12345678a",
        ] {
            assert!(!ssn_digits_valid(invalid.as_bytes()), "{invalid}");
        }
    }

    #[test]
    fn base64() {
        assert_eq!(decode_base64(b"aGVsbG8=").as_deref(), Some(b"hello".as_slice()));
        assert_eq!(decode_base64(b"aGVsbG8").as_deref(), Some(b"hello".as_slice()));
        assert_eq!(decode_base64(b"-_-_").as_deref(), Some([0xfb, 0xff, 0xbf].as_slice()));
        assert_eq!(decode_base64(b"a"), None);
        assert_eq!(decode_base64(b"a.b"), None);
    }

    #[test]
    fn jwt_headers() {
        // {"alg":"HS256","typ":"JWT"}
        assert!(jwt_header_plausible(b"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"));
        // {"typ":"JWT"}: no algorithm.
        assert!(!jwt_header_plausible(b"eyJ0eXAiOiJKV1QifQ"));
        assert!(!jwt_header_plausible(b"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9!"));
    }
}
