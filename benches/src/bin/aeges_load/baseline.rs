//! The baseline server: a plain tonic server around the same screening
//! engine, with the same bans, on one thread as txgate's listener runs.

use std::time::Instant;

use alloy_primitives::{Address, U256};
use txgate_benches::ban;
use txgate_proto::aeges_v1::aeges_service_server::{AegesService, AegesServiceServer};
use txgate_proto::aeges_v1::{VerifyTransactionRequest, VerifyTransactionResponse};
use txgate_screen::{Invalidation, PoolTx, PoolVerdict, Screen, ScreenSettings};

use crate::workload::{BAD_TARGET, BANNED, GAS, payload};

/// The baseline server: tonic, the same engine and bans.
struct Tonic {
    screen: Screen,
}

#[tonic::async_trait]
impl AegesService for Tonic {
    async fn verify_transaction(
        &self,
        request: tonic::Request<VerifyTransactionRequest>,
    ) -> Result<tonic::Response<VerifyTransactionResponse>, tonic::Status> {
        // The same checks and verdict as txgate's, on the message tonic
        // decoded.
        let message = request.into_inner();
        let event_id = message.event_id;
        let tx = message
            .transaction
            .as_ref()
            .ok_or_else(|| tonic::Status::invalid_argument("transaction missing"))?;
        if tx.hash.len() != 32
            || tx.sender.len() != 20
            || tx.to.as_ref().is_some_and(|to| to.len() != 20)
            || tx.value.len() > 32
        {
            return Err(tonic::Status::invalid_argument("bad field"));
        }
        let tx = PoolTx {
            hash: alloy_primitives::B256::from_slice(&tx.hash),
            sender: Address::from_slice(&tx.sender),
            to: tx.to.as_deref().map(Address::from_slice),
            value: U256::from_be_slice(&tx.value),
            gas_limit: tx.gas_limit,
            payload: &tx.payload,
        };
        let now = self.screen.millis(Instant::now());
        let verdict = self.screen.judge(&tx, now);
        if let PoolVerdict::Allow(Some(fp)) = verdict {
            self.screen.remember_pooled(&tx, &fp, now);
        }
        Ok(tonic::Response::new(VerifyTransactionResponse {
            event_id,
            denied: verdict.denied(),
        }))
    }
}

/// Serves the baseline on `port` until the process is stopped.
pub(crate) fn serve_tonic(port: u16) {
    let screen = Screen::new(ScreenSettings::default(), Instant::now());
    let bans: Vec<Invalidation> = (0..BANNED)
        .map(|n| ban(BAD_TARGET, &payload(n), U256::from(1), GAS))
        .collect();
    screen.apply(&bans, 0, 0);
    // One thread, as txgate's Aeges listener runs: the same footing.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        tonic::transport::Server::builder()
            .add_service(AegesServiceServer::new(Tonic { screen }))
            .serve(format!("127.0.0.1:{port}").parse().unwrap())
            .await
            .unwrap();
    });
}
