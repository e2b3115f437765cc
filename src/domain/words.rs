//! Enums whose values are each named by one fixed word: machine states,
//! constraint keys, risks, change-log entities and the like.
//!
//! `word_enum!` declares such an enum
//! once, each variant beside its word, and gives it what every one of them
//! needs:
//!
//! - `ALL`, every value in the order declared (declare them in the order
//!   that means something: the lifecycle, the canonical form);
//! - `as_str`, the value's word, and `Display`, which writes it;
//! - `parse`, the value a word names, or `None`;
//! - when an error is named, that error type (the word that was not
//!   understood, and a message saying what was expected) and `FromStr`.
//!
//! The words are what the store persists and users type, so they are
//! stable: change one and stored data stops parsing.
//!
//! `checked_name!` does the same for names that are any text passing a
//! rule (application names, endpoint names): a newtype over `String` whose
//! only way in is its `is_valid` check. `text_conversions!` gives a type
//! that parses and prints as text (a base, a placement, a machine id) the
//! conversions serde's `try_from = "String", into = "String"` goes through.

/// Declares an enum of unit variants named by words; see [the module
/// documentation](self). For example:
///
/// ```text
/// word_enum! {
///     /// A risk level.
///     #[derive(Clone, Copy, Debug, PartialEq, Eq)]
///     pub enum Risk {
///         Stable => "stable",
///         /// Not for production.
///         Edge => "edge",
///     }
///     /// A word that is not a risk level.
///     error UnknownRisk("unknown risk {0:?}: expected stable or edge");
/// }
/// ```
///
/// The error's message is given as to `thiserror`'s `#[error(...)]`: its
/// one field, `{0}`, is the word that was refused.
macro_rules! word_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $(
                $(#[$variant_meta:meta])*
                $variant:ident => $word:literal
            ),+ $(,)?
        }
        $(
            $(#[$error_meta:meta])*
            error $error:ident($($message:tt)+);
        )?
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $(
                $(#[$variant_meta])*
                $variant,
            )+
        }

        impl $name {
            /// Every value, in the order declared.
            pub const ALL: [$name; [$(stringify!($variant)),+].len()] = [$($name::$variant),+];

            /// The value's word.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)+
                }
            }

            /// The value named by `word`, if any.
            pub fn parse(word: &str) -> Option<$name> {
                match word {
                    $($word => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        $(
            $(#[$error_meta])*
            #[derive(Clone, Debug, PartialEq, Eq, ::thiserror::Error)]
            #[error($($message)+)]
            $vis struct $error(pub String);

            impl ::std::str::FromStr for $name {
                type Err = $error;

                fn from_str(s: &str) -> Result<$name, $error> {
                    $name::parse(s).ok_or_else(|| $error(s.to_string()))
                }
            }
        )?
    };
}

pub(crate) use word_enum;

/// Gives `$name`, a newtype over `String` with a `fn is_valid(&str) ->
/// bool`, its parsing and printing: `parse` (the only way in, refusing
/// with `$error(text)`), `as_str`, `Display`, `AsRef<str>`, `FromStr`,
/// `TryFrom<String>` and `From<$name> for String` (for serde's
/// `try_from`/`into`).
macro_rules! checked_name {
    ($name:ident, $error:ident) => {
        impl $name {
            /// Parses a name.
            ///
            /// # Errors
            ///
            #[doc = concat!("[`", stringify!($error), "`] when `name` breaks the rule.")]
            pub fn parse(name: String) -> Result<$name, $error> {
                if $name::is_valid(&name) {
                    Ok($name(name))
                } else {
                    Err($error(name))
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $error;

            fn from_str(s: &str) -> Result<$name, $error> {
                $name::parse(s.to_string())
            }
        }

        impl TryFrom<String> for $name {
            type Error = $error;

            fn try_from(s: String) -> Result<$name, $error> {
                $name::parse(s)
            }
        }

        impl From<$name> for String {
            fn from(name: $name) -> String {
                name.0
            }
        }
    };
}

pub(crate) use checked_name;

/// Gives `$name`, which parses as text (`FromStr`) and prints as text
/// (`Display`), `TryFrom<String>` by the one and `From<$name> for String`
/// by the other, so that `#[serde(try_from = "String", into = "String")]`
/// serializes it as its text.
macro_rules! text_conversions {
    ($name:ident) => {
        impl TryFrom<String> for $name {
            type Error = <$name as ::std::str::FromStr>::Err;

            fn try_from(s: String) -> Result<$name, Self::Error> {
                s.parse()
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.to_string()
            }
        }
    };
}

pub(crate) use text_conversions;

#[cfg(test)]
mod tests {

    word_enum! {
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        enum Speed {
            Slow => "slow",
            /// Documented variants keep their documentation.
            Fast => "fast-ish",
        }
        error UnknownSpeed("unknown speed {0:?} (expected slow or fast-ish)");
    }

    word_enum! {
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        enum Bare {
            Only => "only",
        }
    }

    #[test]
    fn every_value_is_listed_in_the_order_declared() {
        assert_eq!(Speed::ALL, [Speed::Slow, Speed::Fast]);
        assert_eq!(Bare::ALL, [Bare::Only]);
    }

    #[test]
    fn a_value_prints_as_its_word_and_its_word_parses_back() {
        for speed in Speed::ALL {
            assert_eq!(speed.to_string(), speed.as_str());
            assert_eq!(Speed::parse(speed.as_str()), Some(speed));
            assert_eq!(speed.as_str().parse::<Speed>(), Ok(speed));
        }
        assert_eq!(Speed::Fast.as_str(), "fast-ish");
        assert_eq!(Bare::parse("only"), Some(Bare::Only));
    }

    #[test]
    fn an_unknown_word_is_refused_with_the_enums_own_message() {
        assert_eq!(Speed::parse("Fast"), None);
        let error = "warp".parse::<Speed>().unwrap_err();
        assert_eq!(error, UnknownSpeed("warp".to_string()));
        assert_eq!(
            error.to_string(),
            "unknown speed \"warp\" (expected slow or fast-ish)"
        );
    }
}
