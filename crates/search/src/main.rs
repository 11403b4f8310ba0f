//! The search Lambda function: build configuration and clients once, then serve.

use lambda_http::Error;
use lifeboat_aws::{Clients, Env};
use search::Search;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lifeboat_aws::logs::init();
    let env = Env::from_process();
    let function = Search::from_env(&env, &Clients::load_in_function().await).await?;
    let function = &function;
    lifeboat_lookup::http::serve(|request| async move { function.handle(&request).await }).await
}
