//! A few short texts kept in one string: what a reconciliation holds of
//! each of a million machines and a million instances.
//!
//! A `String` is 24 bytes and an allocation of its own (an instance id of
//! 19 characters takes 32 bytes of heap, a zone's 5 take 8): three of
//! them for each of a million machines were 72 MB of fields and 88 MB of
//! heap. One string of all three and where each ends take 32 and 64.

/// `N` texts, each of which may be absent, in one string.
#[derive(Clone, PartialEq, Eq)]
pub struct Texts<const N: usize> {
    /// The texts one after the other.
    joined: Box<str>,
    /// Where each text ends in `joined`.
    ends: [u32; N],
    /// Which texts are there, a bit each (the first is bit 0).
    present: u8,
}

impl<const N: usize> Texts<N> {
    /// The texts in order (`None` where one is absent).
    ///
    /// # Panics
    ///
    /// If `N` is over 8 (one byte says which texts are there), or if the
    /// texts come to 4 GiB or more (a text from a row of the store or a
    /// provider's listing is under 1 GB).
    pub fn new(texts: [Option<&str>; N]) -> Texts<N> {
        const { assert!(N <= 8, "at most eight texts") };
        let mut joined = String::with_capacity(texts.iter().flatten().map(|t| t.len()).sum());
        let mut ends = [0; N];
        let mut present = 0;
        for (i, text) in texts.into_iter().enumerate() {
            if let Some(text) = text {
                joined.push_str(text);
                present |= 1 << i;
            }
            ends[i] = u32::try_from(joined.len()).expect("texts of under 4 GiB");
        }
        Texts {
            joined: joined.into_boxed_str(),
            ends,
            present,
        }
    }

    /// Text `i` (from 0), if it is there.
    pub fn get(&self, i: usize) -> Option<&str> {
        if i >= N || self.present & (1 << i) == 0 {
            return None;
        }
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        self.joined.get(start..self.ends[i] as usize)
    }
}

impl<const N: usize> Default for Texts<N> {
    /// None of the texts.
    fn default() -> Texts<N> {
        Texts::new([None; N])
    }
}

impl<const N: usize> std::fmt::Debug for Texts<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries((0..N).map(|i| self.get(i))).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_text_reads_back_as_it_was_given_or_absent() {
        let texts = Texts::new([Some("i-0123"), None, Some(""), Some("ünï,✓")]);
        assert_eq!(texts.get(0), Some("i-0123"));
        assert_eq!(texts.get(1), None);
        assert_eq!(texts.get(2), Some(""), "an empty text is there, not absent");
        assert_eq!(texts.get(3), Some("ünï,✓"));
        assert_eq!(texts.get(4), None);
        assert_eq!(
            format!("{texts:?}"),
            r#"[Some("i-0123"), None, Some(""), Some("ünï,✓")]"#
        );
        let none: Texts<2> = Texts::new([None, None]);
        assert_eq!((none.get(0), none.get(1)), (None, None));
        assert_eq!(Texts::<2>::default(), none);
    }

    #[test]
    fn texts_are_equal_when_each_is() {
        let a = Texts::new([Some("ab"), Some("c")]);
        assert_eq!(a, Texts::new([Some("ab"), Some("c")]));
        assert_ne!(a, Texts::new([Some("a"), Some("bc")]));
        assert_ne!(Texts::new([Some(""), None]), Texts::new([None, Some("")]));
    }
}
