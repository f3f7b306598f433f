//! Generate a completion with logprobs and print the token ids (the README's example).
use modelir::{v1, ChoiceExt, Client, Completion};

#[tokio::main]
async fn main() -> Result<(), modelir::Error> {
    let client = Client::connect("127.0.0.1:50051", None).await?;
    let response = client
        .generate(v1::Request {
            model: "reference".into(),
            input: Some(v1::request::Input::Prompt("Once upon a time".into())),
            sampling: Some(v1::SamplingParams { max_output_tokens: Some(8), ..Default::default() }),
            logprob_options: Some(v1::LogprobOptions { require_token_ids: true, ..Default::default() }),
            ..Default::default()
        })
        .await?;
    let lp = response.first().logprobs();
    println!("{:?} {:?}", lp.token_ids, lp.logprobs);
    Ok(())
}
