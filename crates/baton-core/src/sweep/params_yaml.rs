//! Reading parameters from YAML, for both files that have them: a sweep file's `parameters:`
//! and `runs:`, and a workflow task's `matrix:`. Names are checked as they are read (so an
//! error is placed at the key that is wrong), values are kept as the text they were written in
//! (`1e-4` stays `1e-4`). Each file says what it calls a parameter in its messages (`Label`).

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, SeqAccess, Visitor};

/// How a file's messages name its parameters and what they ask for.
pub(crate) struct Label {
    /// "parameter", "matrix parameter".
    pub noun: &'static str,
    /// What a list of values is, as `expecting` says it.
    pub list: &'static str,
    /// The refusal of an empty list.
    pub empty: &'static str,
    /// The refusal of a value holding a NUL byte.
    pub nul: &'static str,
}

/// A parameter's name, checked against the names before it.
pub(crate) struct ParamName<'a> {
    pub seen: Vec<&'a str>,
    pub label: &'static Label,
}

impl<'de> DeserializeSeed<'de> for ParamName<'_> {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for ParamName<'_> {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a parameter name")
    }
    fn visit_str<E: de::Error>(self, name: &str) -> Result<String, E> {
        super::check_name(name).map_err(E::custom)?;
        let noun = self.label.noun;
        // Names that differ only in case would set the same BATON_PARAM_<NAME>.
        if let Some(first) = self
            .seen
            .iter()
            .find(|seen| seen.eq_ignore_ascii_case(name))
        {
            return Err(E::custom(if *first == name {
                format!("{noun} {name} is given twice")
            } else {
                format!(
                    "{noun}s {first} and {name} would both set BATON_PARAM_{}; rename one",
                    name.to_ascii_uppercase()
                )
            }));
        }
        Ok(name.to_string())
    }
}

/// A parameter's values: a non-empty list of scalars.
pub(crate) struct ParamValues(pub &'static Label);

impl<'de> DeserializeSeed<'de> for ParamValues {
    type Value = Vec<String>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<String>, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ParamValues {
    type Value = Vec<String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0.list)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
        let mut values = Vec::new();
        while let Some(value) = seq.next_element_seed(ParamValue(self.0))? {
            values.push(value);
        }
        if values.is_empty() {
            // A parameter without values would make no runs (or no tasks) at all.
            return Err(de::Error::custom(self.0.empty));
        }
        Ok(values)
    }
}

/// One value, as its text: read as a string, so that a YAML number or boolean keeps the form it
/// was written in (`1e-4`, not `0.0001`), which is what the command and the environment get.
pub(crate) struct ParamValue(pub &'static Label);

impl<'de> DeserializeSeed<'de> for ParamValue {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for ParamValue {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string, number or boolean")
    }
    fn visit_str<E: de::Error>(self, value: &str) -> Result<String, E> {
        // It becomes part of a command and an environment variable; neither holds NUL.
        if value.contains('\0') {
            return Err(E::custom(self.0.nul));
        }
        Ok(value.to_string())
    }
}
