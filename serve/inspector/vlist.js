// A windowed list: however many items, only the rows in view (plus a few) are in the DOM.
// Rows have a fixed height, so the scroll position says which items are visible.
const ROW_HEIGHT = 44;
const OVERSCAN = 8;

export class VirtualList {
  constructor(container, renderRow) {
    this.container = container;
    this.renderRow = renderRow; // (item, index, element) -> void
    this.items = [];
    this.spacer = document.createElement("div");
    container.replaceChildren(this.spacer);
    this.rows = new Map(); // index -> element
    this.pending = false;
    container.addEventListener("scroll", () => this.schedule());
    new ResizeObserver(() => this.schedule()).observe(container);
  }

  setItems(items) {
    this.items = items;
    this.clearRows();
    this.schedule();
  }

  append(items, follow) {
    const atBottom = this.atBottom();
    for (const item of items) this.items.push(item); // no spread: a chunk may hold thousands
    this.schedule(follow && atBottom);
  }

  refresh() {
    this.clearRows();
    this.schedule();
  }

  atBottom() {
    const c = this.container;
    return c.scrollHeight - c.scrollTop - c.clientHeight < ROW_HEIGHT;
  }

  clearRows() {
    for (const row of this.rows.values()) row.remove();
    this.rows.clear();
  }

  schedule(toBottom = false) {
    this.toBottom = this.toBottom || toBottom;
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.render();
    });
  }

  render() {
    const c = this.container;
    this.spacer.style.height = `${this.items.length * ROW_HEIGHT}px`;
    if (this.toBottom) {
      c.scrollTop = c.scrollHeight;
      this.toBottom = false;
    }
    const first = Math.max(0, Math.floor(c.scrollTop / ROW_HEIGHT) - OVERSCAN);
    const last = Math.min(this.items.length, Math.ceil((c.scrollTop + c.clientHeight) / ROW_HEIGHT) + OVERSCAN);
    for (const [index, row] of this.rows) {
      if (index < first || index >= last) {
        row.remove();
        this.rows.delete(index);
      }
    }
    for (let index = first; index < last; index++) {
      if (this.rows.has(index)) continue;
      const row = document.createElement("div");
      row.className = "row";
      row.style.top = `${index * ROW_HEIGHT}px`;
      this.renderRow(this.items[index], index, row);
      c.appendChild(row);
      this.rows.set(index, row);
    }
  }
}
