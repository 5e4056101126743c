// The microphone's samples, off the audio thread: each block of mono float samples is posted to the page.
class Tap extends AudioWorkletProcessor {
  process(inputs) {
    const channels = inputs[0];
    if (channels && channels.length) this.port.postMessage(channels[0].slice(0));
    return true;
  }
}
registerProcessor("tap", Tap);
