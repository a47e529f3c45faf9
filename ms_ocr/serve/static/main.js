// The page: pick an image or a PDF page, a task (the served model's own, GET /v1/tasks) or a prompt, read the
// answer as it streams (POST /v1/chat/completions, stream: true), then the model's post-processing of it
// (POST /v1/postprocess: the text `infer` prints and the boxes, drawn over the image).

import {ApiError, getJson, postJson, savedKey, saveKey, streamChat} from "./api.js";
import {AnswerPane} from "./answer.js";
import {clearItems, drawItems, linkHover} from "./overlay.js";
import {layoutItems, layoutMarkdown, recordPages} from "./layout.js";
import {Source} from "./source.js";
import {el} from "./dom.js";

const $ = (id) => document.getElementById(id);
const CUSTOM = "";  // the task select's value for a typed prompt

const state = {config: null, image: null, running: null};

const answer = new AnswerPane({rendered: $("rendered"), raw: $("raw"), answer: $("answer"), copy: $("copy"),
                               saveMd: $("save-md"), saveJson: $("save-json"), viewRendered: $("view-rendered"),
                               viewRaw: $("view-raw")});

function setStatus(text) {
  $("status").textContent = text;
}

// One line under the image: the server's own message for a 4xx, or what went wrong here.
function showError(error) {
  const line = $("error");
  if (error === null) {
    line.hidden = true;
    line.textContent = "";
    return;
  }
  const status = error instanceof ApiError && error.status ? `${error.status}: ` : "";
  line.textContent = status + String(error.message || error).split("\n")[0];
  line.hidden = false;
}

function updateRun() {
  const run = $("run");
  run.textContent = state.running ? "Stop" : "Read";
  run.classList.toggle("stop", Boolean(state.running));
  run.disabled = !state.running && !(state.image && state.config && $("prompt").value.trim());
}

async function loadTasks() {
  try {
    const config = await getJson("/v1/tasks");
    state.config = config;
    $("model").textContent = config.model;
    $("model").title = config.title;
    const select = $("task");
    const keep = select.value;
    select.replaceChildren(...config.tasks.map((t) => el("option", {value: t.name}, t.name)),
                           el("option", {value: CUSTOM}, "custom prompt"));
    select.value = config.tasks.some((t) => t.name === keep) ? keep : config.tasks[0].name;
    taskChanged();
    showError(null);
  } catch (e) {
    state.config = null;
    showError(e);
    if (e instanceof ApiError && e.status === 401) $("key").focus();
  }
  updateRun();
}

function currentTask() {
  const name = $("task").value;
  return state.config ? state.config.tasks.find((t) => t.name === name) || null : null;
}

function taskChanged() {
  const task = currentTask();
  if (task) $("prompt").value = task.prompt;
  updateRun();
}

function onImage(image) {
  if (state.running) state.running.abort();  // the answer on screen is the image's on screen
  state.image = image;
  $("stage").classList.remove("blank");
  $("image").removeAttribute("width");
  $("image").removeAttribute("height");
  $("hint").hidden = true;
  $("stage").hidden = false;
  $("source").textContent = `${image.name} · ${image.width}×${image.height}`;
  clearItems($("overlay"));
  answer.reset();
  setStatus("Ready: choose a task and press Read.");
  updateRun();
}

function dataUrl(blob) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(blob);
  });
}

async function run() {
  if (state.running) {
    state.running.abort();
    return;
  }
  const image = state.image, task = currentTask(), prompt = $("prompt").value;
  const controller = new AbortController();
  state.running = controller;
  updateRun();
  showError(null);
  clearItems($("overlay"));
  answer.reset({model: state.config.model, task: task ? task.name : null, prompt, name: image.name,
                width: image.width, height: image.height});
  const started = performance.now();
  const seconds = () => ((performance.now() - started) / 1000).toFixed(1);
  setStatus("Sending the image…");
  try {
    const body = Object.assign({
      model: state.config.model, temperature: 0, stream: true, stream_options: {include_usage: true},
      messages: [{role: "user", content: [{type: "image_url", image_url: {url: await dataUrl(image.blob)}},
                                          {type: "text", text: prompt}]}],
    }, task ? task.request : {});
    const maxTokens = parseInt($("max-tokens").value, 10);
    if (maxTokens > 0) body.max_tokens = maxTokens;
    let finish = null, usage = null;
    for await (const chunk of streamChat(body, controller.signal)) {
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices || []) {
        if (choice.delta && choice.delta.content) answer.append(choice.delta.content);
        if (choice.finish_reason) finish = choice.finish_reason;
      }
      setStatus(`Reading… ${seconds()} s`);
    }
    const done = await postJson("/v1/postprocess", {text: answer.raw, task: task ? task.name : null, prompt,
                                                    width: image.width, height: image.height}, controller.signal);
    answer.finish(Object.assign({finish_reason: finish, usage}, done), done.boxes);
    if (done.boxes.length) drawItems($("overlay"), done.boxes, image.width, image.height);
    const tokens = usage ? ` · ${usage.completion_tokens} tokens` : "";
    const boxes = done.boxes.length ? ` · ${done.boxes.length} boxes` : "";
    setStatus(`Done in ${seconds()} s${tokens}${boxes} · finish: ${finish}`);
  } catch (e) {
    if (e.name === "AbortError") {
      if (state.image === image) {  // stopped, not replaced by another image
        setStatus(`Stopped after ${seconds()} s.`);
        answer.enableExports(answer.raw.length > 0);  // what arrived can still be saved
      }
    } else {
      setStatus("Failed.");
      showError(e);
    }
  } finally {
    if (state.running === controller) state.running = null;
    updateRun();
  }
}

async function openRecord(file) {
  showError(null);
  let record;
  try {
    record = JSON.parse(await file.text());
  } catch (e) {
    showError(new Error(`${file.name} is not valid JSON`));
    return;
  }
  showRecord(record, file.name);
}

// A document-pipeline record (a loaded NAME.json; the answer of a pipeline endpoint would come here too): its
// blocks drawn over the open image (or a blank page of the record's size) and listed in reading order.
function showRecord(record, name) {
  if (state.running) state.running.abort();
  const pages = recordPages(record);
  if (typeof pages === "string") {
    showError(new Error(`${name}: ${pages}`));
    return;
  }
  const wanted = state.image && state.image.page ? pages.find((p) => p.page === state.image.page) : null;
  const page = wanted || pages[0];
  const {items, width, height} = layoutItems(page, state.image ? state.image.width : 1000,
                                             state.image ? state.image.height : 1000);
  if (!state.image) {  // no picture of the page: the blocks on a blank page of the record's size
    $("hint").hidden = true;
    $("stage").hidden = false;
    $("stage").classList.add("blank");
    $("image").removeAttribute("src");
    $("image").width = Math.min(width, 900);
    $("image").height = Math.round(Math.min(width, 900) * height / width);
  }
  const drawn = drawItems($("overlay"), items, width, height);
  answer.showRecord(record, items, layoutMarkdown(items));
  $("source").textContent = `${name} · ${drawn} blocks` + (state.image ? ` over ${state.image.name}` : "");
  setStatus(`Pipeline result: ${drawn} blocks in reading order.`);
}

new Source({file: $("file"), drop: $("drop"), pager: $("pager"), page: $("page"), pages: $("pages"),
            prev: $("prev"), next: $("next"), image: $("image")},
           {onImage, onError: showError,
            onBusy: (message) => { if (message) setStatus(message); }});
linkHover($("overlay"), $("rendered"));
$("result-file").addEventListener("change", () => {
  const input = $("result-file");
  if (input.files.length) openRecord(input.files[0]);
  input.value = "";
});
$("task").addEventListener("change", taskChanged);
$("prompt").addEventListener("input", () => {
  const task = currentTask();
  if (task && $("prompt").value !== task.prompt) $("task").value = CUSTOM;
  updateRun();
});
$("run").addEventListener("click", run);
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && state.running) state.running.abort();
});
$("key").value = savedKey();
$("key").addEventListener("input", () => saveKey($("key").value.trim()));
$("key").addEventListener("change", loadTasks);
loadTasks();
