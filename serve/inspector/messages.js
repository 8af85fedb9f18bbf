// A model message as one line of text, for a row or the provenance pane.
function blockText(block) {
  switch (block.type) {
    case "text":
    case "reasoning":
      return block.text;
    case "tool-call":
      return `${block.name}(${block.arguments})`;
    case "tool-result":
      return `${block.isError ? "error: " : ""}${(block.content || []).map(blockText).join(" ")}`;
    case "image":
      return `[image ${block.mediaType || ""}]`;
    default:
      return `[${block.type}]`;
  }
}

export function messageText(message) {
  if (!message) return "";
  return (message.content || []).map(blockText).join(" ");
}

// The message an event carries (user/message data is the message itself).
export function eventMessage(event) {
  if (!event.data || typeof event.data !== "object") return null;
  return event.type === "user/message" ? event.data : event.data.message || null;
}

export function eventText(event) {
  const message = eventMessage(event);
  if (message) return messageText(message);
  return JSON.stringify(event.data);
}
