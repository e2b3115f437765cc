//! EC2's errors as berth's [`FailureClass`]es.
//!
//! The class decides what the engine does next (see [`FailureClass`]); the
//! message keeps EC2's own code and words (`InsufficientInstanceCapacity:
//! We currently do not have sufficient ...`), so that status shows what
//! AWS said and the broker recognises throttling by its code.
//!
//! | class | codes |
//! | --- | --- |
//! | zone-specific | `InsufficientInstanceCapacity`, `InsufficientHostCapacity`, `InsufficientReservedInstanceCapacity`, `InsufficientCapacity`, `InsufficientAddressCapacity`, `InsufficientFreeAddressesInSubnet`, `Unsupported`, `InstanceTypeNotOffered`, and any error saying the request is "not supported in your requested Availability Zone" |
//! | transient | `RequestLimitExceeded`, `Throttling`, `ThrottlingException`, `RequestThrottled`, `InternalError`, `InternalFailure`, `ServiceUnavailable`, `Unavailable`, `RequestExpired`, `IdempotentParameterMismatch`, `IdempotentInstanceTerminated`; any other code with a 5xx status; timeouts and network failures |
//! | unauthorized | `AuthFailure`, `UnauthorizedOperation`, `InvalidClientTokenId`, `SignatureDoesNotMatch`, `OptInRequired`, `Blocked`, `PendingVerification`, `UnrecognizedClientException`, `ExpiredToken`, `AccessDenied`, `AccessDeniedException`; no credentials at all, or none that load (an SSO session expired since the start) |
//! | permanent | `InvalidAMIID.*`, `InvalidParameterValue`, `InvalidParameterCombination`, and any other code with a 4xx status |

use std::error::Error as StdError;

use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};

use crate::contracts::provider::{FailureClass, ProviderError};

const ZONE_SPECIFIC: [&str; 8] = [
    "InsufficientInstanceCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientAddressCapacity",
    "InsufficientFreeAddressesInSubnet",
    "Unsupported",
    "InstanceTypeNotOffered",
];

/// Zone-specific codes that say this instance type cannot be had in this
/// zone now (rather than, say, that the subnet is out of addresses).
const TYPE_IN_ZONE: [&str; 6] = [
    "InsufficientInstanceCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "InsufficientCapacity",
    "Unsupported",
    "InstanceTypeNotOffered",
];

const TRANSIENT: [&str; 11] = [
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
    "RequestExpired",
    "IdempotentParameterMismatch",
    "IdempotentInstanceTerminated",
];

const UNAUTHORIZED: [&str; 11] = [
    "AuthFailure",
    "UnauthorizedOperation",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "OptInRequired",
    "Blocked",
    "PendingVerification",
    "UnrecognizedClientException",
    "ExpiredToken",
    "AccessDenied",
    "AccessDeniedException",
];

/// How EC2 words a request for a type the zone does not have (sometimes
/// under `InvalidParameterValue`).
const NOT_IN_ZONE: &str = "not supported in your requested Availability Zone";

/// The class of an error EC2 answered with `code` (and `status`, the HTTP
/// status, when known).
pub fn classify_code(code: &str, message: &str, status: Option<u16>) -> FailureClass {
    if ZONE_SPECIFIC.contains(&code) || message.contains(NOT_IN_ZONE) {
        FailureClass::ZoneSpecific
    } else if TRANSIENT.contains(&code) {
        FailureClass::Transient
    } else if UNAUTHORIZED.contains(&code) {
        FailureClass::Unauthorized
    } else if code.starts_with("InvalidAMIID.")
        || code == "InvalidParameterValue"
        || code == "InvalidParameterCombination"
    {
        FailureClass::Permanent
    } else {
        match status {
            Some(s) if s >= 500 => FailureClass::Transient,
            Some(s) if s >= 400 => FailureClass::Permanent,
            _ => FailureClass::Transient,
        }
    }
}

/// Whether an error with `code` means that its instance type is not to be
/// had in its zone for now.
pub fn marks_type_unavailable(code: &str, message: &str) -> bool {
    TYPE_IN_ZONE.contains(&code) || message.contains(NOT_IN_ZONE)
}

/// The error's code, when EC2 answered with one.
pub fn code_of<E, R>(error: &SdkError<E, R>) -> Option<&str>
where
    E: ProvideErrorMetadata,
{
    match error {
        SdkError::ServiceError(service) => service.err().code(),
        _ => None,
    }
}

/// Every message in an error's source chain, joined.
fn chain(error: &(dyn StdError + 'static)) -> String {
    let mut parts = vec![error.to_string()];
    let mut source = error.source();
    while let Some(inner) = source {
        let text = inner.to_string();
        if !parts.contains(&text) {
            parts.push(text);
        }
        source = inner.source();
    }
    parts.join(": ")
}

/// `error` of the call `operation` as a [`ProviderError`]: its class per
/// the module's table, and `Code: message`.
pub fn provider_error<E>(
    operation: &str,
    error: &SdkError<E, aws_sdk_ec2::config::http::HttpResponse>,
) -> ProviderError
where
    E: ProvideErrorMetadata + StdError + 'static,
{
    match error {
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            let code = service.err().code().unwrap_or("Unknown");
            let message = service
                .err()
                .message()
                .map_or_else(|| chain(service.err()), str::to_string);
            ProviderError::new(
                classify_code(code, &message, Some(status)),
                format!("{code}: {message}"),
            )
        }
        _ => {
            let text = chain(error);
            let (class, what) = match error {
                // No credentials to sign with (none in the chain, or an
                // SSO session expired since the start): as good as refused
                // ones. The SDK resolves them once the request is built,
                // so this comes as a dispatch failure, or as a
                // construction failure before that.
                SdkError::ConstructionFailure(_) | SdkError::DispatchFailure(_)
                    if text.to_ascii_lowercase().contains("credential") =>
                {
                    (FailureClass::Unauthorized, "could not be sent")
                }
                SdkError::ConstructionFailure(_) => (FailureClass::Permanent, "could not be sent"),
                SdkError::TimeoutError(_) => (FailureClass::Transient, "timed out"),
                _ => (FailureClass::Transient, "failed"),
            };
            ProviderError::new(class, format!("{operation} {what}: {text}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_and_offering_refusals_are_zone_specific() {
        for code in ZONE_SPECIFIC {
            assert_eq!(
                classify_code(code, "", Some(400)),
                FailureClass::ZoneSpecific,
                "{code}"
            );
        }
        assert_eq!(
            classify_code(
                "InvalidParameterValue",
                "Your requested instance type (m7i.large) is not supported in your requested Availability Zone (us-east-1e).",
                Some(400)
            ),
            FailureClass::ZoneSpecific
        );
    }

    #[test]
    fn throttling_and_service_trouble_are_transient() {
        for code in TRANSIENT {
            assert_eq!(
                classify_code(code, "", Some(400)),
                FailureClass::Transient,
                "{code}"
            );
        }
        assert_eq!(
            classify_code("SomethingNew", "", Some(503)),
            FailureClass::Transient
        );
        assert_eq!(
            classify_code("SomethingNew", "", None),
            FailureClass::Transient
        );
    }

    #[test]
    fn credentials_that_cannot_be_loaded_are_unauthorized_whenever_the_sdk_finds_out() {
        use aws_sdk_ec2::config::http::HttpResponse;
        use aws_sdk_ec2::error::ConnectorError;
        use aws_sdk_ec2::operation::run_instances::RunInstancesError;

        // How the SDK reports a credentials provider's failure: while it
        // sends the request (its identity is resolved then), or before.
        let loading = "an error occurred while loading credentials";
        let dispatch: SdkError<RunInstancesError, HttpResponse> =
            SdkError::dispatch_failure(ConnectorError::other(loading.into(), None));
        let refused = provider_error("RunInstances", &dispatch);
        assert_eq!(
            refused.class,
            FailureClass::Unauthorized,
            "{}",
            refused.message
        );
        assert!(refused.message.contains(loading), "{}", refused.message);
        let construction: SdkError<RunInstancesError, HttpResponse> =
            SdkError::construction_failure("no credentials in the chain");
        assert_eq!(
            provider_error("RunInstances", &construction).class,
            FailureClass::Unauthorized
        );
        // A connection that failed is only that.
        let io: SdkError<RunInstancesError, HttpResponse> =
            SdkError::dispatch_failure(ConnectorError::io("connection reset".into()));
        assert_eq!(
            provider_error("RunInstances", &io).class,
            FailureClass::Transient
        );
    }

    #[test]
    fn refused_credentials_and_permissions_are_unauthorized() {
        for code in UNAUTHORIZED {
            assert_eq!(
                classify_code(code, "", Some(403)),
                FailureClass::Unauthorized,
                "{code}"
            );
        }
    }

    #[test]
    fn bad_images_and_parameters_are_permanent() {
        for code in [
            "InvalidAMIID.NotFound",
            "InvalidAMIID.Malformed",
            "InvalidParameterValue",
            "InvalidParameterCombination",
        ] {
            assert_eq!(
                classify_code(code, "", Some(400)),
                FailureClass::Permanent,
                "{code}"
            );
        }
        assert_eq!(
            classify_code("InvalidKeyPair.NotFound", "", Some(400)),
            FailureClass::Permanent
        );
    }

    #[test]
    fn only_type_refusals_mark_the_type_unavailable_in_the_zone() {
        assert!(marks_type_unavailable("InsufficientInstanceCapacity", ""));
        assert!(marks_type_unavailable("Unsupported", ""));
        assert!(marks_type_unavailable(
            "InvalidParameterValue",
            "... is not supported in your requested Availability Zone (z)"
        ));
        assert!(!marks_type_unavailable("InsufficientAddressCapacity", ""));
        assert!(!marks_type_unavailable("RequestLimitExceeded", ""));
    }
}
