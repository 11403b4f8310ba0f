//! [`SecretStore`] on SSM Parameter Store: SecureString parameters read by
//! path (`GetParametersByPath`, decrypted, ten to a page), so that one call
//! serves ten operators.
//!
//! The role needs `ssm:GetParametersByPath` on the path itself
//! (`arn:…:parameter/lifeboat/operators`), and `kms:Decrypt` on the key when
//! the parameters are encrypted with a customer managed key rather than
//! `aws/ssm`.

use std::collections::BTreeMap;

use async_trait::async_trait;
use lifeboat_core::ports::{SecretStore, StoreError};

/// [`SecretStore`] on SSM Parameter Store.
#[derive(Debug, Clone)]
pub struct SsmSecretStore {
    client: aws_sdk_ssm::Client,
}

impl SsmSecretStore {
    pub fn new(client: aws_sdk_ssm::Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl SecretStore for SsmSecretStore {
    async fn secrets_under(&self, path: &str) -> Result<BTreeMap<String, String>, StoreError> {
        let mut secrets = BTreeMap::new();
        let mut pages = self
            .client
            .get_parameters_by_path()
            .path(path)
            .recursive(false)
            .with_decryption(true)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| {
                StoreError::Unavailable(format!(
                    "GetParametersByPath {path}: {}",
                    aws_sdk_ssm::error::DisplayErrorContext(&e)
                ))
            })?;
            for parameter in page.parameters.unwrap_or_default() {
                let (Some(name), Some(value)) = (parameter.name, parameter.value) else {
                    continue;
                };
                if let Some(last) = name.rsplit('/').next().filter(|l| !l.is_empty()) {
                    secrets.insert(last.to_owned(), value);
                }
            }
        }
        Ok(secrets)
    }
}
