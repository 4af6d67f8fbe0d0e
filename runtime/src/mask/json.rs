//! What an object key says about its value: `"password": "hunter2"` is a secret although `hunter2` alone is
//! just a word, and `"phone": 4155552671` is a phone although ten bare digits are usually a timestamp.

/// The kind an object key announces for its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyHint {
    None,
    Secret,
    Phone,
    Ssn,
    Card,
}

impl KeyHint {
    /// The hint a key gives, from its letters and digits, lower-cased (`DB_Password`, `db-password` and
    /// `dbPassword` are all `dbpassword`).
    pub(crate) fn of_key(key: &str) -> KeyHint {
        // Normalised on the stack: this runs for every key of every result.
        let mut buffer = [0u8; 64];
        let mut len = 0;
        for byte in key.bytes().filter(u8::is_ascii_alphanumeric) {
            if len == buffer.len() {
                return KeyHint::None;
            }
            buffer[len] = byte.to_ascii_lowercase();
            len += 1;
        }
        let Ok(key) = std::str::from_utf8(&buffer[..len]) else { return KeyHint::None };
        let ends = |suffixes: &[&str]| suffixes.iter().any(|suffix| key.ends_with(suffix));
        let is = |names: &[&str]| names.contains(&key);

        if ends(&["pagetoken", "nexttoken", "continuationtoken", "synctoken", "cursortoken"])
            || ["max", "min", "num", "total", "count"].iter().any(|counter| key.starts_with(counter))
        {
            return KeyHint::None;
        }
        if ends(&[
            "password",
            "passwords",
            "passwd",
            "passphrase",
            "passcode",
            "secret",
            "secrets",
            "token",
            "apikey",
            "apikeys",
            "privatekey",
            "secretkey",
            "accesskey",
            "credential",
            "credentials",
        ]) || is(&["pin", "cvv", "cvv2", "cvc", "securitycode", "otp"])
        {
            return KeyHint::Secret;
        }
        if ends(&[
            "phone",
            "phones",
            "phonenumber",
            "phonenumbers",
            "phoneno",
            "mobile",
            "mobilenumber",
            "fax",
            "faxnumber",
        ]) || is(&["tel", "telephone", "cell", "msisdn"])
        {
            return KeyHint::Phone;
        }
        if ends(&["ssn", "ssns", "socialsecuritynumber", "socialsecurityno"]) || is(&["socialsecurity"]) {
            return KeyHint::Ssn;
        }
        if ends(&["cardnumber", "cardnumbers", "cardno", "creditcard", "debitcard"])
            || is(&["pan", "ccnumber", "primaryaccountnumber"])
        {
            return KeyHint::Card;
        }
        KeyHint::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        for key in ["password", "DB_PASSWORD", "dbPassword", "client_secret", "api-key", "access_token", "pin", "cvv"] {
            assert_eq!(KeyHint::of_key(key), KeyHint::Secret, "{key}");
        }
        for key in ["next_page_token", "max_tokens", "token_count", "total_tokens", "name", "key", "tokenizer"] {
            assert_eq!(KeyHint::of_key(key), KeyHint::None, "{key}");
        }
        assert_eq!(KeyHint::of_key("phone"), KeyHint::Phone);
        assert_eq!(KeyHint::of_key("home_phone"), KeyHint::Phone);
        assert_eq!(KeyHint::of_key("phones"), KeyHint::Phone);
        assert_eq!(KeyHint::of_key("customer_ssn"), KeyHint::Ssn);
        assert_eq!(KeyHint::of_key("card_number"), KeyHint::Card);
        assert_eq!(KeyHint::of_key("order_number"), KeyHint::None);
    }
}
